#include "orchard/train/distributed.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>  // (2.x: and c10d::Backend)
// ORCHARD_GLOO: CMake's option (a PyTorch pip install has no gloo headers).
#ifdef ORCHARD_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <torch/version.h>
#ifdef ORCHARD_NCCL  // CMake: a CUDA libtorch (it defines USE_C10D_NCCL too)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <mutex>

#include "orchard/core/error.h"
#include "orchard/layers/batch_norm.h"

namespace orchard::train {
namespace {

int env_int(const char* name, int fallback, int min_value) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  try {
    size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used != std::string(v).size() || x < min_value) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw Error(std::string("environment variable ") + name + "='" + v +
                "' is not an integer >= " + std::to_string(min_value));
  }
}

std::pair<std::string, int> host_port(const std::string& address, const std::string& what) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) throw Error(what + ": '" + address + "' is not host:port");
  try {
    return {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
  } catch (const std::exception&) {
    throw Error(what + ": '" + address + "' has no port number");
  }
}

}  // namespace

ClusterSpec parse_tf_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("TF_CONFIG is not JSON: ") + e.what());
  }
  if (!j.contains("cluster") || !j.contains("task")) throw Error("TF_CONFIG needs 'cluster' and 'task'");
  std::vector<std::pair<std::string, std::string>> tasks;  // (type, address) in rank order
  for (const char* type : {"chief", "worker"}) {
    if (!j["cluster"].contains(type)) continue;
    for (const auto& a : j["cluster"][type]) tasks.emplace_back(type, a.get<std::string>());
  }
  for (const auto& [type, _] : j["cluster"].items())
    if (type != "chief" && type != "worker")
      throw Error("TF_CONFIG cluster has '" + type +
                  "' tasks: only chief and worker (multi_worker_mirrored) are "
                  "supported; parameter servers are not");
  if (tasks.empty()) throw Error("TF_CONFIG cluster lists no workers");
  const std::string type = j["task"].value("type", "worker");
  const int index = j["task"].value("index", 0);
  int rank = -1, seen = 0;
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].first == type && seen++ == index) rank = static_cast<int>(i);
  if (rank < 0)
    throw Error("TF_CONFIG task " + type + ":" + std::to_string(index) + " is not in the cluster (" +
                std::to_string(tasks.size()) + " tasks)");
  ClusterSpec s;
  s.rank = rank;
  s.local_rank = 0;
  s.world_size = static_cast<int>(tasks.size());
  std::tie(s.master_addr, s.master_port) = host_port(tasks[0].second, "TF_CONFIG cluster address");
  s.source = "TF_CONFIG";
  return s;
}

ClusterSpec cluster_from_environment() {
  if (const char* world = std::getenv("WORLD_SIZE"); world && *world) {
    ClusterSpec s;
    s.world_size = env_int("WORLD_SIZE", 1, 1);
    s.rank = env_int("RANK", 0, 0);
    s.local_rank = env_int("LOCAL_RANK", s.rank, 0);
    if (s.rank >= s.world_size)
      throw Error("RANK=" + std::to_string(s.rank) + " is not below WORLD_SIZE=" + std::to_string(s.world_size));
    if (const char* a = std::getenv("MASTER_ADDR"); a && *a) s.master_addr = a;
    s.master_port = env_int("MASTER_PORT", 29500, 1);
    s.source = "env";
    return s;
  }
  if (const char* tf = std::getenv("TF_CONFIG"); tf && *tf) return parse_tf_config(tf);
  return {};
}

// The collectives' interface: libtorch 2.x moved them from ProcessGroup to its backends
// (ProcessGroupGloo and ProcessGroupNCCL derive from c10d::Backend there).
#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif

struct Distributed::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Group> group;
  // Where the collectives' tensors must be: NCCL reduces CUDA tensors only, Gloo CPU ones.
  at::Device device = at::kCPU;
};

namespace {

c10::intrusive_ptr<Group> gloo_group(const ClusterSpec& spec, std::chrono::milliseconds timeout,
                                     const c10::intrusive_ptr<c10d::Store>& store) {
#ifndef ORCHARD_GLOO
  throw Error(
      "multi-process CPU training needs the Gloo process group, which this build leaves out "
      "(-DORCHARD_GLOO=OFF): train on GPUs (NCCL) or in one process");
#else
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
      spec.master_addr == "localhost" ? "127.0.0.1" : spec.master_addr));
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, spec.rank, spec.world_size, options);
#endif
}

#ifdef ORCHARD_NCCL
// One GPU per process: the launcher's LOCAL_RANK picks it (torchrun's convention).
c10::intrusive_ptr<Group> nccl_group(const ClusterSpec& spec, std::chrono::milliseconds timeout,
                                     const c10::intrusive_ptr<c10d::Store>& store) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(spec.local_rank));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, spec.rank, spec.world_size, options);
}
#endif

}  // namespace

Distributed::Distributed(const ClusterSpec& spec, std::chrono::milliseconds timeout, bool cuda)
    : spec_(spec), timeout_(timeout), impl_(std::make_unique<Impl>()) {
#ifndef ORCHARD_NCCL
  if (cuda)
    throw Error(
        "multi-process training on CUDA needs the NCCL backend: build Orchard against a CUDA libtorch "
        "(docs/distributed.md), or train on the CPU with --num_gpus 0");
#endif
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(spec.master_port);
  so.isServer = spec.rank == 0;
  so.numWorkers = static_cast<size_t>(spec.world_size);
  so.waitWorkers = true;
  so.timeout = timeout;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(spec.master_addr, so);
#ifdef ORCHARD_NCCL
    if (cuda) {
      impl_->device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(spec.local_rank));
      impl_->group = nccl_group(spec, timeout, impl_->store);
    }
#endif
    if (!impl_->group) impl_->group = gloo_group(spec, timeout, impl_->store);
  } catch (const c10::Error& e) {
    throw Error("rank " + std::to_string(spec.rank) + ": cannot join the " + std::to_string(spec.world_size) +
                "-process group at " + spec.master_addr + ":" + std::to_string(spec.master_port) + " within " +
                std::to_string(timeout.count() / 1000) + "s: " + e.what_without_backtrace());
  }
  spdlog::info("rank {} of {} joined the group at {}:{} ({}, from {})", spec.rank, spec.world_size, spec.master_addr,
               spec.master_port, cuda ? "NCCL on " + impl_->device.str() : std::string("Gloo"), spec.source);
}

std::string Distributed::device() const { return impl_->device.str(); }

Distributed::~Distributed() { layers::set_batch_norm_override({}); }

void Distributed::broadcast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (auto& p : module.parameters()) tensors.push_back(p);
  for (auto& b : module.buffers()) tensors.push_back(b);
  for (auto& t : tensors) {
    std::vector<at::Tensor> one = {t.to(impl_->device)};  // the same tensor where it already is
    impl_->group->broadcast(one)->wait(timeout_);
    if (!one[0].is_same(t)) t.copy_(one[0]);
  }
}

void Distributed::allreduce_sum(std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}).to(at::kDouble));
  std::vector<at::Tensor> buffer = {torch::cat(flat).to(impl_->device)};
  impl_->group->allreduce(buffer)->wait(timeout_);
  int64_t offset = 0;
  for (auto& t : tensors) {
    t.copy_(buffer[0].slice(0, offset, offset + t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

namespace {

// y = (x - mean) / sqrt(var + eps) * weight + bias with mean and (biased) var over the
// global batch: per-channel sums of x and x^2 and the count are summed over replicas. The
// backward pass sums dy and dy * xhat over replicas the same way; the weight and bias
// gradients stay local (the gradient reducer sums them).
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static Distributed* group;

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, at::Tensor running_mean, at::Tensor running_var, double eps,
                            double momentum) {
    const int64_t c = x.size(1);
    const std::vector<int64_t> dims = {0, 2, 3}, shape = {1, c, 1, 1};
    const auto xd = x.to(at::kDouble);
    std::vector<at::Tensor> stats = {xd.sum(dims), (xd * xd).sum(dims),
                                     torch::full({1}, static_cast<double>(x.numel() / c), torch::kDouble)};
    group->allreduce_sum(stats);
    const double n = stats[2].item<double>();
    const auto mean = stats[0] / n;
    const auto var = (stats[1] / n - mean * mean).clamp_min(0);
    const auto invstd = (var + eps).rsqrt();
    {
      torch::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype()) * momentum);
      running_var.mul_(1 - momentum).add_((var * (n / std::max(1.0, n - 1))).to(running_var.dtype()) * momentum);
    }
    const auto xhat = ((xd - mean.view(shape)) * invstd.view(shape)).to(x.dtype());
    ctx->save_for_backward({xhat, invstd.to(x.dtype()), weight});
    ctx->saved_data["n"] = n;
    return xhat * weight.view(shape) + bias.view(shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& xhat = saved[0];
    const auto& invstd = saved[1];
    const auto& weight = saved[2];
    const double n = ctx->saved_data["n"].toDouble();
    const auto& dy = grads[0];
    const int64_t c = dy.size(1);
    const std::vector<int64_t> dims = {0, 2, 3}, shape = {1, c, 1, 1};
    const auto sum_dy = dy.sum(dims), sum_dy_xhat = (dy * xhat).sum(dims);
    std::vector<at::Tensor> global = {sum_dy.clone(), sum_dy_xhat.clone()};
    group->allreduce_sum(global);
    const auto g_dy = global[0].to(dy.dtype()), g_dy_xhat = global[1].to(dy.dtype());
    const auto dx = (weight * invstd).view(shape) / n * (dy * n - g_dy.view(shape) - xhat * g_dy_xhat.view(shape));
    return {dx, sum_dy_xhat, sum_dy, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
Distributed* SyncBatchNormFunction::group = nullptr;

}  // namespace

void Distributed::enable_sync_batch_norm() {
  SyncBatchNormFunction::group = this;
  layers::set_batch_norm_override([](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x) {
    return SyncBatchNormFunction::apply(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.options.eps(),
                                        bn.options.momentum().value());
  });
}

void Distributed::barrier() { impl_->group->barrier()->wait(timeout_); }

struct GradientReducer::Impl {
  struct Bucket {
    std::vector<size_t> params;
    at::Tensor flat;
    size_t pending = 0;
    bool ready = false;
    c10::intrusive_ptr<c10d::Work> work;
  };
  c10::intrusive_ptr<Group> group;
  std::chrono::milliseconds timeout{0};
  int world = 1;
  std::vector<at::Tensor> params;
  std::vector<size_t> bucket_of, offset_of;
  std::vector<Bucket> buckets;
  std::vector<bool> seen;
  size_t next_launch = 0;
  std::mutex mu;
  double finish_seconds = 0;
  int64_t steps = 0;

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].ready) {
      std::vector<at::Tensor> t = {buckets[next_launch].flat};
      buckets[next_launch].work = group->allreduce(t);
      ++next_launch;
    }
  }

  void on_gradient(size_t i, const at::Tensor& grad) {
    std::lock_guard<std::mutex> lock(mu);
    if (seen[i]) return;
    seen[i] = true;
    Bucket& b = buckets[bucket_of[i]];
    const auto n = params[i].numel();
    b.flat.slice(0, static_cast<int64_t>(offset_of[i]), static_cast<int64_t>(offset_of[i]) + n)
        .view(params[i].sizes())
        .copy_(grad);
    if (--b.pending == 0) {
      b.ready = true;
      launch_ready();
    }
  }
};

GradientReducer::GradientReducer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GradientReducer::~GradientReducer() = default;
size_t GradientReducer::num_buckets() const { return impl_->buckets.size(); }

void GradientReducer::start() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& b : impl_->buckets) {
    b.flat.zero_();  // a parameter without a gradient this step contributes zeros
    b.pending = b.params.size();
    b.ready = false;
    b.work.reset();
  }
  std::fill(impl_->seen.begin(), impl_->seen.end(), false);
  impl_->next_launch = 0;
}

double GradientReducer::finish_seconds() const { return impl_->finish_seconds; }
int64_t GradientReducer::steps() const { return impl_->steps; }

void GradientReducer::finish() {
  const auto started = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& b : impl_->buckets) b.ready = true;  // parameters that got no gradient stay zero
    impl_->launch_ready();
  }
  for (auto& b : impl_->buckets) {
    b.work->wait(impl_->timeout);
    b.flat.div_(impl_->world);
  }
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    auto& p = impl_->params[i];
    const auto& b = impl_->buckets[impl_->bucket_of[i]];
    auto mean =
        b.flat
            .slice(0, static_cast<int64_t>(impl_->offset_of[i]), static_cast<int64_t>(impl_->offset_of[i]) + p.numel())
            .view(p.sizes());
    if (p.grad().defined()) p.mutable_grad().copy_(mean);
    else p.mutable_grad() = mean.clone();
  }
  impl_->finish_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ++impl_->steps;
}

std::unique_ptr<GradientReducer> Distributed::gradient_reducer(const std::vector<at::Tensor>& params,
                                                               int64_t bucket_bytes) {
  auto impl = std::make_unique<GradientReducer::Impl>();
  impl->group = impl_->group;
  impl->timeout = timeout_;
  impl->world = spec_.world_size;
  impl->params = params;
  impl->bucket_of.resize(params.size());
  impl->offset_of.resize(params.size());
  impl->seen.assign(params.size(), false);
  // Reverse order; the first bucket holds about 1 MB, the others about bucket_bytes.
  int64_t limit = 1 << 20, filled = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t bytes = params[k].numel() * static_cast<int64_t>(params[k].element_size());
    if (impl->buckets.empty() || (filled > 0 && filled + bytes > limit)) {
      if (!impl->buckets.empty()) limit = bucket_bytes;
      impl->buckets.emplace_back();
      filled = 0;
    }
    auto& b = impl->buckets.back();
    impl->bucket_of[k] = impl->buckets.size() - 1;
    impl->offset_of[k] = static_cast<size_t>(filled / static_cast<int64_t>(params[k].element_size()));
    b.params.push_back(k);
    filled += bytes;
  }
  for (auto& b : impl->buckets) {
    int64_t numel = 0;
    for (size_t k : b.params) numel += params[k].numel();
    b.flat = torch::zeros({numel}, params[b.params.front()].options());
  }
  auto* raw = impl.get();
  for (size_t i = 0; i < params.size(); ++i) {
    auto p = params[i];
    p.register_hook([raw, i](const at::Tensor& grad) { raw->on_gradient(i, grad); });
  }
  spdlog::debug("gradient all-reduce: {} parameters in {} buckets", params.size(), impl->buckets.size());
  return std::unique_ptr<GradientReducer>(new GradientReducer(std::move(impl)));
}

}  // namespace orchard::train
