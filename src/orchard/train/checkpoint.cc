#include "orchard/train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <caffe2/serialize/inline_container.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/core/zip_check.h"
#include "orchard/models/tf_weights.h"
#include "orchard/train/moving_average.h"

namespace orchard::train {

int64_t checkpoint_step(const std::string& path) {
  static const std::regex re(R"(ckpt-(\d+)\.pt)");
  std::smatch m;
  const std::string name = base_name(path);
  if (std::regex_match(name, m, re)) return std::stoll(m[1]);
  return -1;
}

std::string resolve_checkpoint_prefix(const std::string& path) {
  if (file_exists(path)) return path;
  static const std::regex re(R"((?:.*[^0-9])?ckpt-(\d+)(?:\.pt)?)");
  std::smatch m;
  const std::string name = base_name(path);
  if (std::regex_match(name, m, re)) {
    const std::string ours = join_path(parent_path(path), "ckpt-" + m[1].str() + ".pt");
    if (file_exists(ours)) return ours;
    throw Error(path + ": no such checkpoint (looked for " + ours + ")");
  }
  throw Error(path + ": no such checkpoint (give a ckpt-N.pt file, or the prefix model_dir/model.ckpt-N)");
}

CheckpointManager::CheckpointManager(std::string model_dir, int max_to_keep)
    : dir_(std::move(model_dir)), max_to_keep_(max_to_keep) {}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::list() const {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!dir_exists(dir_)) return out;
  for (const std::string& file : list_dir(dir_)) {
    const int64_t step = checkpoint_step(file);
    if (step >= 0) out.emplace_back(step, file);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int CheckpointManager::remove_stale_temporaries() const {
  int removed = 0;
  if (!is_local_path(dir_) || !dir_exists(dir_)) return 0;  // object stores have no temporaries
  for (const std::string& file : list_dir(dir_)) {
    const std::string name = base_name(file);
    if (name.find(".tmp-") != std::string::npos &&
        (name.rfind("ckpt-", 0) == 0 || name.rfind("checkpoint", 0) == 0 || name.rfind("config.json", 0) == 0 ||
         name.rfind("labels.txt", 0) == 0)) {
      remove_file(file);
      ++removed;
    }
  }
  return removed;
}

std::string CheckpointManager::latest() const {
  const std::string index = join_path(dir_, "checkpoint");
  if (file_exists(index)) {
    std::istringstream in(read_file(index));
    std::string line;
    while (std::getline(in, line)) {
      const std::string key = "model_checkpoint_path: \"";
      if (line.rfind(key, 0) == 0) {
        std::string name = line.substr(key.size());
        name = name.substr(0, name.find('"'));
        const std::string p = join_path(dir_, name);
        if (file_exists(p)) return p;
      }
    }
  }
  auto all = list();
  return all.empty() ? "" : all.back().second;
}

namespace {

c10::Dict<std::string, at::Tensor> weight_dict(const NamedWeights& weights) {
  c10::Dict<std::string, at::Tensor> out;
  for (const auto& [name, t] : weights) out.insert(name, t.detach().cpu().contiguous());
  return out;
}

NamedWeights named_weights(torch::nn::Module& model) {
  NamedWeights out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

size_t optimizer_parameter_count(const torch::optim::Optimizer& optimizer) {
  size_t n = 0;
  for (const auto& group : optimizer.param_groups()) n += group.params().size();
  return n;
}

}  // namespace

std::string CheckpointManager::save(int64_t step, torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                                    const Meta& meta, const MovingAverage* average) {
  ensure_writable_dir(dir_);
  const NamedWeights own = named_weights(model);
  c10::Dict<std::string, std::string> meta_dict;
  for (const auto& [k, v] : meta) meta_dict.insert(k, v);
  if (optimizer)
    meta_dict.insert_or_assign("optimizer_parameters", std::to_string(optimizer_parameter_count(*optimizer)));
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("model", weight_dict(average ? average->averages() : own));
  if (average) {
    root.insert("training_weights", weight_dict(own));
    meta_dict.insert_or_assign("moving_average_decay", std::to_string(average->decay()));
  }
  root.insert("meta", meta_dict);
  root.insert("step", step);
  if (optimizer) {
    torch::serialize::OutputArchive archive;
    optimizer->save(archive);
    std::ostringstream os;
    archive.save_to(os);
    // A uint8 tensor, not a string: Python's torch.load decodes pickled strings as UTF-8.
    const std::string blob = os.str();
    root.insert(
        "optimizer",
        torch::from_blob(const_cast<char*>(blob.data()), {static_cast<int64_t>(blob.size())}, torch::kUInt8).clone());
  }
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    root.insert("rng", gen.get_state());
  }
  const std::vector<char> bytes = torch::pickle_save(root);

  const std::string name = "ckpt-" + std::to_string(step) + ".pt";
  const std::string path = join_path(dir_, name);
  // Publication order (object stores have no rename): the checkpoint first, then the state
  // file that names it, then the deletion of old ones. A reader following `checkpoint` never
  // finds a checkpoint that is not complete; a job killed in between leaves the previous one
  // named and whole.
  atomic_write_file(path, std::string(bytes.begin(), bytes.end()));

  auto all = list();
  std::string index = "model_checkpoint_path: \"" + name + "\"\n";
  const size_t keep_from = all.size() > static_cast<size_t>(max_to_keep_) ? all.size() - max_to_keep_ : 0;
  for (size_t i = keep_from; i < all.size(); ++i)
    index += "all_model_checkpoint_paths: \"" + base_name(all[i].second) + "\"\n";
  atomic_write_file(join_path(dir_, "checkpoint"), index);
  for (size_t i = 0; i < keep_from; ++i) {
    try {
      remove_file(all[i].second);
    } catch (const std::exception& e) {
      spdlog::warn("could not delete the old checkpoint {}: {}", all[i].second, e.what());
    }
  }
  return path;
}

namespace {
std::pair<int64_t, Meta> restore_local_checkpoint(const std::string& path, const std::string& file,
                                                  torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                                                  const RestoreOptions& options);
}  // namespace

std::pair<int64_t, Meta> restore_checkpoint(const std::string& url, torch::nn::Module& model,
                                            torch::optim::Optimizer* optimizer, const RestoreOptions& options) {
  if (!file_exists(url)) throw Error(url + ": cannot open: no such file");
  // libtorch reads the zip archive by seeking: an object is downloaded first.
  const LocalCopy local(url);
  return restore_local_checkpoint(url, local.path(), model, optimizer, options);
}

namespace {
std::pair<int64_t, Meta> restore_local_checkpoint(const std::string& path, const std::string& file,
                                                  torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                                                  const RestoreOptions& options) {
  try {
    check_zip_crcs(file);
  } catch (const DataError& e) {
    throw UnreadableCheckpoint(std::string(e.what()) + " (not an Orchard checkpoint, or a truncated or corrupt one)");
  }
  c10::IValue root;
  try {
    // What torch::pickle_load does, with the archive read from the file record by record into
    // the tensors' storages, instead of from a whole-file copy in memory (3-6x faster for a
    // 100 MB checkpoint here).
    caffe2::serialize::PyTorchStreamReader reader(file);
    root = torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt, c10::nullopt, reader);
  } catch (const std::exception& e) {
    // libtorch's message carries a C++ stack trace after its first line.
    const std::string what = e.what();
    throw UnreadableCheckpoint(path + ": unreadable checkpoint, truncated or corrupt (" +
                               what.substr(0, std::min(what.find('\n'), size_t{200})) + ")");
  }
  if (!root.isGenericDict()) throw Error(path + ": not an Orchard checkpoint (top level is not a dict)");
  auto dict = root.toGenericDict();
  if (!dict.contains("model") || !dict.contains("step"))
    throw Error(path + ": not an Orchard checkpoint (no model/step)");

  Meta meta;
  if (dict.contains("meta"))
    for (const auto& e : dict.at("meta").toGenericDict()) meta[e.key().toStringRef()] = e.value().toStringRef();
  for (const auto& [k, v] : options.expect) {
    auto it = meta.find(k);
    const std::string got = it == meta.end() ? "<absent>" : it->second;
    if (got != v)
      throw Error(path + ": checkpoint has " + k + "=" + got + " but this run has " + k + "=" + v +
                  " (use another --model_dir, or --clean to start over)");
  }

  const bool has_training_weights = dict.contains("training_weights");
  const char* model_key = options.training_weights && has_training_weights ? "training_weights" : "model";
  std::map<std::string, at::Tensor> weights;
  for (const auto& e : dict.at(model_key).toGenericDict()) weights[e.key().toStringRef()] = e.value().toTensor();
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing;
  auto load = [&](const std::string& name, at::Tensor& dst) {
    if (options.skip && options.skip(name)) {
      if (options.skipped) options.skipped->push_back(name);
      return;
    }
    const std::string source = options.source_name ? options.source_name(name) : name;
    auto it = weights.find(source);
    if (options.skip_unavailable && (it == weights.end() || it->second.sizes() != dst.sizes())) {
      if (options.unavailable) {
        models::TfMatch v;
        v.orchard = name;
        v.tf = v.key = source;
        v.orchard_shape = dst.sizes().vec();
        if (it != weights.end()) v.tf_shape = it->second.sizes().vec();
        v.status = it == weights.end() ? models::TfMatch::kMissing : models::TfMatch::kShapeMismatch;
        options.unavailable->push_back(std::move(v));
      }
      return;
    }
    if (it == weights.end()) {
      missing.push_back(source == name ? name : source + " (for " + name + ")");
      return;
    }
    if (it->second.sizes() != dst.sizes()) {
      std::ostringstream msg;
      msg << path << ": variable '" << source << "' has shape " << it->second.sizes() << " in the checkpoint but "
          << dst.sizes() << " in the model" << (source == name ? "" : " ('" + name + "')");
      throw Error(msg.str());
    }
    dst.copy_(it->second);
    if (options.restored) options.restored->push_back(name);
  };
  for (auto& p : model.named_parameters()) load(p.key(), p.value());
  for (auto& b : model.named_buffers()) load(b.key(), b.value());
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 5; ++i) list += (i ? ", " : "") + missing[i];
    throw Error(path + ": " + std::to_string(missing.size()) + " model variables missing from the checkpoint (" + list +
                (missing.size() > 5 ? ", ..." : "") + ")");
  }
  if (options.average) {
    if (has_training_weights) {
      NamedWeights averages;
      for (const auto& e : dict.at("model").toGenericDict())
        averages.emplace_back(e.key().toStringRef(), e.value().toTensor());
      options.average->load(averages, path);
    } else {
      options.average->reset();  // a checkpoint without averages: they start at its weights
    }
  }
  // The optimizer state fits only the same set of trained variables: a run that trains more
  // (im2txt's second phase, --train_inception) starts its optimizer afresh.
  bool optimizer_fits = true;
  if (optimizer && meta.count("optimizer_parameters") &&
      meta.at("optimizer_parameters") != std::to_string(optimizer_parameter_count(*optimizer))) {
    optimizer_fits = false;
    if (options.load_optimizer)
      spdlog::warn("{}: its optimizer state covers {} variables, this run trains {}; the optimizer starts afresh", path,
                   meta.at("optimizer_parameters"), optimizer_parameter_count(*optimizer));
  }
  if (optimizer && options.load_optimizer && optimizer_fits && dict.contains("optimizer")) {
    const auto& value = dict.at("optimizer");
    std::string blob;
    if (value.isString()) {
      blob = value.toStringRef();  // checkpoints written before 2026-11-29 evening
    } else {
      const auto bytes = value.toTensor().contiguous();
      blob.assign(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
    }
    std::istringstream is(blob);
    torch::serialize::InputArchive archive;
    // The optimizer state (momentum, Adam's moments) goes where the model's variables are:
    // a checkpoint written on a GPU resumes on the CPU and the other way round.
    const auto params = model.parameters();
    archive.load_from(is, params.empty() ? c10::optional<at::Device>() : params.front().device());
    optimizer->load(archive);
  }
  if (options.load_rng && dict.contains("rng")) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(dict.at("rng").toTensor());
  }
  return {dict.at("step").toInt(), meta};
}
}  // namespace

PartialRestore restore_part(const std::string& checkpoint, const std::string& flag, torch::nn::Module& model,
                            std::function<bool(const std::string& name)> skip,
                            std::function<std::string(const std::string& name)> source_name,
                            const models::TfNameMap& tf_map, bool skip_unavailable) {
  PartialRestore r;
  if (tf::is_tensorflow_checkpoint(checkpoint)) {
    if (!tf_map)
      throw Error(flag + " " + checkpoint +
                  " is a TensorFlow checkpoint, and this model has no map from TensorFlow's variable names yet "
                  "(docs/import.md lists the models that have one)");
    r.path = tf::resolve_checkpoint(checkpoint);
    r.tensorflow = true;
    auto t = models::restore_tf_checkpoint(checkpoint, model, tf_map, skip, skip_unavailable);
    r.restored = std::move(t.restored);
    r.skipped = std::move(t.skipped);
    r.unused = std::move(t.unused);
    r.unavailable = std::move(t.unavailable);
    return r;
  }
  r.path = checkpoint;
  if (!file_exists(r.path) && dir_exists(r.path)) {
    r.path = CheckpointManager(checkpoint).latest();
    if (r.path.empty()) throw Error(flag + " " + checkpoint + ": no checkpoint in that directory");
  }
  if (!file_exists(r.path)) throw Error(flag + " " + checkpoint + ": no such file");
  RestoreOptions ro;
  ro.load_optimizer = false;
  ro.load_rng = false;
  ro.skip = std::move(skip);
  ro.source_name = std::move(source_name);
  ro.skip_unavailable = skip_unavailable;
  ro.unavailable = &r.unavailable;
  ro.restored = &r.restored;
  ro.skipped = &r.skipped;
  restore_checkpoint(r.path, model, nullptr, ro);
  return r;
}

}  // namespace orchard::train
