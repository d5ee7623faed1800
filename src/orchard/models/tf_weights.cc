#include "orchard/models/tf_weights.h"

#include <torch/torch.h>

#include <set>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/tf_checkpoint.h"

namespace orchard::models {
namespace {

std::string list(const std::vector<std::string>& names, size_t most = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > most) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

std::vector<std::pair<std::string, at::Tensor>> model_variables(torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  for (auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

// Name lookup in a checkpoint: TF1 names as they are; for tf.train.Checkpoint files also
// each variable's creation name (the object graph's full_name), so a map can use
// "conv1/kernel" where the file says "model/layer_with_weights-0/kernel/.ATTRIBUTES/...".
class Names {
 public:
  explicit Names(const tf::CheckpointReader& r) : reader_(r) {
    std::map<std::string, int> uses;
    const auto tracked = r.tracked_variables();
    for (const auto& v : tracked)
      if (!v.full_name.empty()) ++uses[v.full_name];
    for (const auto& v : tracked)
      if (!v.full_name.empty() && uses[v.full_name] == 1 && !r.find(v.full_name)) alias_[v.full_name] = v.key;
  }
  // The checkpoint's key for a TF name, or "".
  std::string key(const std::string& name) const {
    if (reader_.find(name)) return name;
    auto it = alias_.find(name);
    return it == alias_.end() ? "" : it->second;
  }

 private:
  const tf::CheckpointReader& reader_;
  std::map<std::string, std::string> alias_;
};

}  // namespace

std::optional<TfName> tf_batch_norm_name(const std::string& scope, const std::string& field, bool scale) {
  const std::string bn = scope + "/BatchNorm/";
  if (field == "weight") {
    TfName n{bn + "gamma"};
    if (!scale) n.default_value = 1.0f;
    return n;
  }
  if (field == "bias") return TfName{bn + "beta"};
  if (field == "running_mean") return TfName{bn + "moving_mean"};
  if (field == "running_var") return TfName{bn + "moving_variance"};
  if (field == "num_batches_tracked") return std::nullopt;
  throw std::invalid_argument("not a batch norm variable: " + scope + " " + field);
}

int TfMapping::count(TfMatch::Status s) const {
  int n = 0;
  for (const auto& v : variables) n += v.status == s;
  return n;
}

std::vector<int64_t> torch_to_tf_shape(const std::vector<int64_t>& s, TfLayout layout, int64_t m) {
  switch (layout) {
    case TfLayout::kSame: return s;
    case TfLayout::kConv:
      if (s.size() == 4) return {s[2], s[3], s[1], s[0]};
      break;
    case TfLayout::kDepthwise:
      if (s.size() == 4 && s[1] == 1 && m >= 1 && s[0] % m == 0) return {s[2], s[3], s[0] / m, m};
      break;
    case TfLayout::kDense:
      if (s.size() == 2) return {s[1], s[0]};
      break;
    case TfLayout::kConvDense:
      if (s.size() == 2) return {1, 1, s[1], s[0]};
      break;
  }
  return {-1};  // never equal to a checkpoint's shape
}

at::Tensor tf_to_torch(const tf::Tensor& value, TfLayout layout) {
  auto floats = value.floats();
  auto t = torch::from_blob(floats.data(), {static_cast<int64_t>(floats.size())}, torch::kFloat).clone();
  t = t.reshape(value.shape);
  switch (layout) {
    case TfLayout::kSame: return t;
    case TfLayout::kConv: return t.permute({3, 2, 0, 1}).contiguous();
    case TfLayout::kDepthwise: {
      // [H, W, in, m] -> [in, m, H, W] -> [in * m, 1, H, W]: output channel c * m + k, as TF's.
      const auto s = t.sizes();
      return t.permute({2, 3, 0, 1}).reshape({s[2] * s[3], 1, s[0], s[1]}).contiguous();
    }
    case TfLayout::kDense: return t.t().contiguous();
    case TfLayout::kConvDense: return t.reshape({t.size(2), t.size(3)}).t().contiguous();
  }
  return t;
}

at::Tensor torch_to_tf(const at::Tensor& value, TfLayout layout, int64_t m) {
  auto t = value.detach().to(torch::kCPU, torch::kFloat);
  switch (layout) {
    case TfLayout::kSame: break;
    case TfLayout::kConv: t = t.permute({2, 3, 1, 0}); break;
    case TfLayout::kDepthwise:  // [in * m, 1, H, W] -> [in, m, H, W] -> [H, W, in, m]
      t = t.reshape({t.size(0) / m, m, t.size(2), t.size(3)}).permute({2, 3, 0, 1});
      break;
    case TfLayout::kDense: t = t.t(); break;
    case TfLayout::kConvDense: t = t.t().reshape({1, 1, t.size(1), t.size(0)}); break;
  }
  return t.contiguous();
}

TfMapping match_tf_checkpoint(const tf::CheckpointReader& checkpoint, torch::nn::Module& model, const TfNameMap& map,
                              const std::function<bool(const std::string&)>& skip) {
  TfMapping m;
  const Names names(checkpoint);
  std::set<std::string> used;
  for (const auto& [name, value] : model_variables(model)) {
    TfMatch v;
    v.orchard = name;
    v.orchard_shape = value.sizes().vec();
    const auto tf_name = map(name);
    if (!tf_name) {
      v.status = TfMatch::kNoTfName;
    } else {
      v.name = *tf_name;
      v.tf = tf_name->name;
      const std::string key = v.key = names.key(v.tf);
      if (!key.empty()) {
        used.insert(key);
        v.tf_shape = checkpoint.find(key)->shape;
      }
      if (skip && skip(name)) v.status = TfMatch::kSkipped;
      else if (key.empty()) v.status = tf_name->default_value ? TfMatch::kDefaulted : TfMatch::kMissing;
      else if (torch_to_tf_shape(v.orchard_shape, tf_name->layout, tf_name->depthwise_multiplier) != v.tf_shape)
        v.status = TfMatch::kShapeMismatch;
    }
    m.variables.push_back(std::move(v));
  }
  for (const auto& v : checkpoint.variables())
    if (!used.count(v.name)) m.unused.push_back(v.name);
  return m;
}

TfRestore restore_tf_checkpoint(const std::string& path, torch::nn::Module& model, const TfNameMap& map,
                                const std::function<bool(const std::string&)>& skip, bool skip_unavailable) {
  const tf::CheckpointReader checkpoint(path);
  if (const auto absent = checkpoint.missing_data_files(); !absent.empty())
    throw Error(checkpoint.prefix() + ": its data file " + absent[0] +
                " is missing: the index lists the variables, their values are in that file (only the .index "
                "copied or downloaded?)" +
                (absent.size() > 1 ? " (" + std::to_string(absent.size()) + " data files missing)" : ""));
  const TfMapping m = match_tf_checkpoint(checkpoint, model, map, skip);
  TfRestore r;
  std::vector<std::string> missing, mismatched;
  for (const auto& v : m.variables) {
    if (skip_unavailable && (v.status == TfMatch::kMissing || v.status == TfMatch::kShapeMismatch)) {
      r.unavailable.push_back(v);
      continue;
    }
    if (v.status == TfMatch::kMissing) missing.push_back(v.tf + " (for " + v.orchard + ")");
    if (v.status == TfMatch::kShapeMismatch) {
      std::ostringstream s;
      s << v.tf << " " << tf::shape_string(v.tf_shape) << " for " << v.orchard << " "
        << tf::shape_string(v.orchard_shape);
      mismatched.push_back(s.str());
    }
  }
  if (!mismatched.empty())
    throw Error(checkpoint.prefix() + ": " + std::to_string(mismatched.size()) +
                " TensorFlow variables have another shape than the model's: " + list(mismatched) +
                " (another architecture, depth multiplier or class count?)");
  if (!missing.empty())
    throw Error(checkpoint.prefix() + ": " + std::to_string(missing.size()) +
                " model variables are not in the TensorFlow checkpoint: " + list(missing) +
                " ('orchard checkpoint inspect --map' shows the whole match)");
  r.unused = m.unused;
  std::map<std::string, at::Tensor> targets;
  for (auto& [name, value] : model_variables(model)) targets.emplace(name, value);
  torch::NoGradGuard no_grad;
  for (const auto& v : m.variables) {
    if (v.status == TfMatch::kSkipped) r.skipped.push_back(v.orchard);
    if (v.status != TfMatch::kMatched && v.status != TfMatch::kDefaulted) continue;
    auto& dst = targets.at(v.orchard);
    if (v.status == TfMatch::kDefaulted) {
      dst.fill_(*v.name.default_value);
    } else {
      dst.copy_(tf_to_torch(checkpoint.read(v.key), v.name.layout));
    }
    r.restored.push_back(v.orchard);
  }
  return r;
}

std::vector<std::string> write_tf_checkpoint(const std::string& prefix, torch::nn::Module& model, const TfNameMap& map,
                                             int64_t global_step) {
  tf::BundleWriter writer(prefix);
  std::vector<std::string> left_out;
  std::map<std::string, std::string> written;  // TF name -> Orchard name
  for (const auto& [name, value] : model_variables(model)) {
    const auto tf_name = map(name);
    if (!tf_name) {
      left_out.push_back(name);
      continue;
    }
    auto [it, fresh] = written.emplace(tf_name->name, name);
    if (!fresh)
      throw Error("two variables, " + it->second + " and " + name + ", have the TensorFlow name " + tf_name->name);
    const auto t = torch_to_tf(value, tf_name->layout, tf_name->depthwise_multiplier);
    writer.add(tf_name->name, tf::kFloat, t.sizes().vec(),
               std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * 4));
  }
  writer.add("global_step", tf::kInt64, {}, std::string(reinterpret_cast<const char*>(&global_step), 8));
  writer.finish();
  return left_out;
}

}  // namespace orchard::models
