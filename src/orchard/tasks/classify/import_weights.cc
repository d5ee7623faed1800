// orchard import-weights: a PyTorch (torchvision) state dict saved with torch.save, or a
// TensorFlow checkpoint (--format tf: TF-Slim's, Model Garden's), becomes an Orchard classify
// model_dir: ckpt-0.pt (usable as a model_dir, a --fine_tune_checkpoint or an
// --inception_checkpoint_file) and config.json.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/models/registry.h"
#include "orchard/models/tf_weights.h"
#include "orchard/models/torch_state_dict.h"
#include "orchard/tasks/classify/classification.h"
#include "orchard/tasks/registry.h"
#include "orchard/train/checkpoint.h"

namespace orchard::tasks {
namespace {

namespace stdfs = std::filesystem;

struct ImportFlags {
  std::string arch;
  std::string format = "torch";
  std::string state_dict;  // --format torch
  std::string checkpoint;  // --format tf
  std::string out_dir;
  int64_t num_classes = 0;  // 0: the classifier weight's rows
  int image_size = 0;       // 0: 299 for inception_v3, 224 otherwise
  std::string input_normalization = "torchvision";
};

// torchvision's ImageNet normalisation, (x / 255 - mean) / std per RGB channel.
constexpr double kTorchvisionStd[3] = {0.229, 0.224, 0.225};

std::string join(const std::vector<std::string>& names, size_t limit = 20) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

void write_model_dir(const ImportFlags& f, tasks::ClassificationTask& task, const std::string& source,
                     const std::string& input_normalization) {
  ensure_writable_dir(f.out_dir);
  train::CheckpointManager manager(f.out_dir);
  if (!manager.latest().empty()) throw Error(f.out_dir + " already holds checkpoints; import into an empty directory");
  const std::string path = manager.save(0, *task.module(), nullptr, task.signature());
  const nlohmann::json config = {
      {"task", "classify"},
      {"model", f.arch},
      {"num_classes", task.config().model.num_classes},
      {"width", 0},
      {"zero_init_residual", false},
      {"image_size", task.config().image_size},
      {"data_format", "channels_first"},
      {"augmentation", "resnet"},
      {"imported_from", is_local_path(source) ? stdfs::absolute(local_path(source)).string() : source},
      {"input_normalization", input_normalization}};
  atomic_write_file(join_path(f.out_dir, "config.json"), config.dump(2) + "\n");
  spdlog::info("imported {} ({} classes) into {}", f.arch, task.config().model.num_classes, path);
}

// A TensorFlow checkpoint through the model's name map. The models it serves take what Orchard
// feeds them: TF-Slim's resnet_v1 and Model Garden's ResNet-50 RGB minus the ImageNet means,
// TF-Slim's Inception-v3 and MobileNetV2 [-1, 1].
void run_import_tf(ImportFlags f) {
  if (f.checkpoint.empty()) throw Error("--format tf needs --checkpoint (a TensorFlow checkpoint)");
  // TF-Slim's networks by the names they have there: Orchard's variants that compute what
  // TF-Slim's compute ('SAME' padding, TF's pooling) rather than torchvision's.
  if (f.arch == "mobilenet_v2" || f.arch == "inception_v3") {
    spdlog::info("--format tf --arch {0}: TF-Slim's {0} is Orchard's {0}_slim", f.arch);
    f.arch += "_slim";
  }
  const auto map = models::tf_name_map(f.arch);
  if (!map)
    throw Error("--format tf --arch " + f.arch +
                ": no TensorFlow names for this model (resnet_v1_50/101/152, resnet50_garden, inception_v3, "
                "mobilenet_v2 have them)");
  const tf::CheckpointReader reader(f.checkpoint);
  // The checkpoint's own classes (TF-Slim's: 1001, background first), from its classifier's bias.
  const std::string classifier_bias = f.arch == "mobilenet_v2_slim" ? "classifier.1.bias" : "fc.bias";
  const auto bias = map(classifier_bias);
  const auto* bias_var = bias ? reader.find(bias->name) : nullptr;
  const int64_t checkpoint_classes = bias_var && bias_var->shape.size() == 1 ? bias_var->shape[0] : 0;
  tasks::ClassificationConfig c;
  c.model.arch = f.arch;
  // Until the class count is known, a one-class model: the checkpoint is matched with it, the
  // classifier aside, before --num_classes is asked for.
  c.model.num_classes = f.num_classes > 0 ? f.num_classes : checkpoint_classes > 0 ? checkpoint_classes : 1;
  c.model.initialize = false;
  c.image_size = f.image_size > 0 ? f.image_size : (f.arch == "inception_v3_slim" ? 299 : 224);
  tasks::ClassificationTask task(c);
  {
    // Whether this is a checkpoint of --arch at all: a different network is said as such, not
    // as a missing classifier or a list of missing variables.
    const auto classifier = [](const std::string& n) {
      return n.rfind("fc.", 0) == 0 || n.rfind("classifier.", 0) == 0;
    };
    const auto m = models::match_tf_checkpoint(reader, *task.module(), map, classifier);
    int wanted = 0, found = 0;
    std::vector<std::string> examples;
    for (const auto& v : m.variables) {
      if (v.status == models::TfMatch::kNoTfName || v.status == models::TfMatch::kSkipped) continue;
      ++wanted;
      if (v.status == models::TfMatch::kMatched || v.status == models::TfMatch::kDefaulted) ++found;
      else if (examples.size() < 3)
        examples.push_back(v.status == models::TfMatch::kMissing
                               ? v.tf + " absent"
                               : v.tf + " " + tf::shape_string(v.tf_shape) + " where the model has " +
                                     tf::shape_string(models::torch_to_tf_shape(v.orchard_shape, v.name.layout,
                                                                                v.name.depthwise_multiplier)));
    }
    if (found < wanted)
      throw Error(reader.prefix() + ": not a checkpoint of --arch " + f.arch + ": " + std::to_string(found) + " of " +
                  std::to_string(wanted) +
                  " of the model's variables (the classifier aside) are in it with their "
                  "shape (" +
                  join(examples, 3) + "; " + std::to_string(reader.variables().size()) +
                  " variables in the checkpoint; 'orchard checkpoint inspect " + f.checkpoint + " --map " + f.arch +
                  "' shows the whole match)");
  }
  if (f.num_classes == 0 && checkpoint_classes == 0)
    throw Error(reader.prefix() + ": its " + f.arch + " network fits, but it has no " +
                (bias ? bias->name : classifier_bias) + " to take --num_classes from; pass it");
  const auto r = models::restore_tf_checkpoint(f.checkpoint, *task.module(), map);
  if (!r.unused.empty())
    spdlog::info("{}: {} TensorFlow variables not used (e.g. {})", reader.prefix(), r.unused.size(), r.unused[0]);
  write_model_dir(f, task, reader.prefix(), "none");
}

void run_import(const ImportFlags& f) {
  if (f.format == "tf") return run_import_tf(f);
  if (f.format != "torch") throw Error("--format must be torch or tf, not '" + f.format + "'");
  if (f.state_dict.empty()) throw Error("--format torch needs --state_dict");
  if (f.input_normalization != "torchvision" && f.input_normalization != "none")
    throw Error("--input_normalization must be torchvision or none, not '" + f.input_normalization + "'");
  const bool inception = f.arch == "inception_v3";
  const bool mobilenet = f.arch == "mobilenet_v2";
  // torchvision's names of the classifier and of the first convolution (which takes the input).
  const std::string classifier = mobilenet ? "classifier.1.weight" : "fc.weight";
  const std::string first_conv = mobilenet ? "features.0.0.weight" : "conv1.weight";
  const auto source = models::read_torch_state_dict(f.state_dict);
  std::map<std::string, torch::Tensor> weights(source.begin(), source.end());

  tasks::ClassificationConfig c;
  c.model.arch = f.arch;
  c.model.num_classes = f.num_classes;
  if (c.model.num_classes == 0) {
    auto it = weights.find(classifier);
    if (it == weights.end()) throw Error(f.state_dict + ": no " + classifier + " to take --num_classes from; pass it");
    c.model.num_classes = it->second.size(0);
  }
  c.image_size = f.image_size > 0 ? f.image_size : (inception ? 299 : 224);
  tasks::ClassificationTask task(c);  // unknown --arch: the registry's error lists the names
  auto module = task.module();

  // Every variable of the model must come from the file with its shape; torchvision's
  // auxiliary classifier (AuxLogits.*, training only) is the one thing left behind.
  std::vector<std::string> missing, mismatched, unexpected;
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  auto copy_in = [&](const std::string& name, torch::Tensor& dst) {
    auto it = weights.find(name);
    if (it == weights.end()) return missing.push_back(name);
    used.insert(name);
    if (it->second.sizes() != dst.sizes()) {
      std::ostringstream s;
      s << name << " " << it->second.sizes() << " (model " << dst.sizes() << ")";
      return mismatched.push_back(s.str());
    }
    dst.copy_(it->second.to(dst.dtype()));
  };
  for (auto& p : module->named_parameters()) copy_in(p.key(), p.value());
  for (auto& b : module->named_buffers()) copy_in(b.key(), b.value());
  std::vector<std::string> ignored;
  for (const auto& [name, _] : source) {
    if (used.count(name)) continue;
    (inception && name.rfind("AuxLogits.", 0) == 0 ? ignored : unexpected).push_back(name);
  }
  std::string problems;
  if (!missing.empty()) problems += "\n  missing keys: " + join(missing);
  if (!unexpected.empty()) problems += "\n  unexpected keys: " + join(unexpected);
  if (!mismatched.empty()) problems += "\n  shape mismatches: " + join(mismatched);
  if (!problems.empty()) throw Error(f.state_dict + " does not hold " + f.arch + " weights:" + problems);
  if (!ignored.empty()) spdlog::info("left out {} auxiliary-classifier entries (AuxLogits.*)", ignored.size());

  // Orchard feeds the ResNets and MobileNetV2 RGB minus the ImageNet means (0-255 scale): dividing
  // the first convolution's input channels by 255 * std makes that torchvision's
  // (x / 255 - mean) / std (means equal within 0.5 / 255; the zero padding agrees too).
  // Inception-v3's weights take [-1, 1], which Orchard feeds.
  if (!inception && f.input_normalization == "torchvision") {
    auto w = module->named_parameters()[first_conv];
    for (int ch = 0; ch < 3; ++ch) w.select(1, ch).div_(255.0 * kTorchvisionStd[ch]);
  }

  write_model_dir(f, task, f.state_dict, inception ? "none" : f.input_normalization);
  spdlog::info("{} tensors from {}", used.size(), f.state_dict);
}

}  // namespace

Verb import_weights_command() {
  return {
      "import-weights",
      "Import a torchvision state dict (torch.save) or a TensorFlow checkpoint of a classifier as a model_dir",
      [](FlagSet* c) {
        auto f = std::make_shared<ImportFlags>();
        c->add_option(
             "--arch", f->arch,
             "resnet18..152, mobilenet_v2 or inception_v3 (torchvision's names); --format tf: resnet_v1_50/101/152, "
             "inception_v3, mobilenet_v2 (TF-Slim's; the last two become inception_v3_slim, mobilenet_v2_slim), "
             "resnet50_garden (Model Garden's Keras ResNet-50)")
            ->required();
        c->add_option("--format", f->format, "torch (a state dict) | tf (a TensorFlow checkpoint)")
            ->capture_default_str();
        c->add_option("--state_dict", f->state_dict,
                      "--format torch: the file torch.save(model.state_dict(), FILE) wrote");
        c->add_option("--checkpoint", f->checkpoint,
                      "--format tf: the checkpoint (a prefix such as model.ckpt, one of its files, a directory)");
        c->add_option("--out_dir", f->out_dir, "New model_dir: ckpt-0.pt, checkpoint, config.json")->required();
        c->add_option("--num_classes", f->num_classes, "Classes (0: the rows of the classifier's weight)");
        c->add_option("--image_size", f->image_size, "config.json's input size (0: 299 for inception_v3, else 224)");
        c->add_option("--input_normalization", f->input_normalization,
                      "ResNets, mobilenet_v2: torchvision (fold its mean/std input scaling into the first "
                      "convolution, for Orchard's RGB-minus-means input) or none (weights as they are)")
            ->capture_default_str();
        return [f] { run_import(*f); };
      }};
}

}  // namespace orchard::tasks
