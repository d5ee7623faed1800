// Data parallelism over libtorch's c10d: rendezvous through a TCPStore (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT as `orchard launch` and torchrun set them, or TF_CONFIG as
// multi-worker TensorFlow jobs have it), a Gloo (CPU) or NCCL (CUDA) process group,
// gradient all-reduce in ~25 MB buckets launched from autograd hooks as DDP does (so
// communication overlaps the backward pass), and in-place sums for metrics. (DDP's own
// c10d::Reducer cannot be used: Debian's libtorch-dev lacks the distributed-autograd headers
// reducer.hpp includes.)
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace orchard::train {

struct ClusterSpec {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;  // "env", "TF_CONFIG", or "" for a single process
};

// From RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT when WORLD_SIZE is set,
// else from TF_CONFIG when set, else a single process. Bad values are errors naming the
// variable.
ClusterSpec cluster_from_environment();

// TF_CONFIG: {"cluster": {"chief": ["h:p"], "worker": ["h:p", ...]}, "task": {"type": "worker",
// "index": i}}. Ranks follow the cluster order (chief first, then workers); the rendezvous
// is the first task's host:port.
ClusterSpec parse_tf_config(const std::string& json);

class GradientReducer;

class Distributed {
 public:
  // Joins the group; waits at most `timeout` for the others and for every collective.
  Distributed(const ClusterSpec& spec, std::chrono::milliseconds timeout, bool cuda);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return spec_.rank; }
  int world_size() const { return spec_.world_size; }
  bool is_chief() const { return spec_.rank == 0; }
  // The device of this process's replica: "cpu", or "cuda:LOCAL_RANK" with NCCL.
  std::string device() const;

  // Parameters and buffers of `module` from rank 0 to all.
  void broadcast(torch::nn::Module& module);
  // Element-wise sums over all ranks, in place (tensors of any shape; one collective).
  void allreduce_sum(std::vector<at::Tensor>& tensors);
  void barrier();

  // Batch norms of the ResNets normalise with the statistics of the global batch (summed
  // over replicas in forward and backward) instead of each replica's; running statistics
  // follow the global batch. Off: per-replica statistics, as TF's mirrored strategy.
  void enable_sync_batch_norm();

  // Gradient averaging for `params`: call start() before each backward pass and finish()
  // after it.
  std::unique_ptr<GradientReducer> gradient_reducer(const std::vector<at::Tensor>& params,
                                                    int64_t bucket_bytes = 25 << 20);

 private:
  struct Impl;
  ClusterSpec spec_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Impl> impl_;
};

// Parameters are grouped into buckets in reverse order (roughly the order the backward pass
// produces their gradients; the first bucket is small so communication starts early). A hook
// on each parameter copies its gradient into the bucket; a full bucket is all-reduced
// asynchronously, buckets strictly in index order so every rank issues the same collectives
// in the same order. finish() waits for them and writes the means into the .grad fields.
class GradientReducer {
 public:
  ~GradientReducer();
  void start();
  void finish();
  size_t num_buckets() const;
  // Seconds spent in finish() (waiting for the all-reduces the backward pass did not hide,
  // plus writing the means back), summed over steps, and the number of steps.
  double finish_seconds() const;
  int64_t steps() const;

 private:
  friend class Distributed;
  struct Impl;
  explicit GradientReducer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace orchard::train
