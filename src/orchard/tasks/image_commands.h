// The inference verbs the image-model tasks (classify, multilabel) share: `eval` on the
// validation shards, `export` to ONNX and `predict` on image files, each restoring a model_dir
// as its config.json describes it (a flag given on the command line wins).
//
// A task supplies a traits struct:
//   using Flags = ...;  using Task = ...;          its flag struct (RuntimeFlags with model_dir,
//                                                  data_dir, batch_size) and Task class
//   static void inference_defaults(Flags&, bool predict);  the seed's eval/predict defaults
//   static void load(const std::string& model_dir, Flags*, const FlagGiven&);  config.json
//   static auto config(const Flags&);              the task config (for inference)
//   static std::string validation_files(const Flags&);
//   static void add_inference_flags(FlagSet*, Flags&, bool predict);  e.g. --threshold, --top_k
//   static nlohmann::json eval_report(const std::map<std::string, double>& metrics);
//   static void print_predictions(const Task&, const std::vector<std::string>& files,
//                                 const at::Tensor& logits, const std::vector<std::string>& labels,
//                                 const Flags&, bool json);  // the task's typed predictions, printed
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "orchard/core/files.h"
#include "orchard/data/tools.h"
#include "orchard/engine/evaluator.h"
#include "orchard/tasks/command_support.h"
#include "orchard/tasks/registry.h"
#include "orchard/train/runtime.h"

namespace orchard::tasks {

template <class Traits>
void add_image_inference_verbs(TaskCommands* commands, const std::string& export_help,
                               const std::string& predict_help) {
  using Flags = typename Traits::Flags;
  using TaskType = typename Traits::Task;
  struct Inference {
    Flags f;
    std::string checkpoint;
    std::string stats_file;
    std::vector<std::string> inputs;
    bool json_out = false;
  };
  // The task of model_dir, restored from --checkpoint (default: the latest), for inference.
  auto restore = [](Inference& in, const FlagGiven& given, bool nchw) {
    train::configure_threads(in.f.num_threads);
    Traits::load(in.f.model_dir, &in.f, given);
    auto config = Traits::config(in.f);
    config.model.initialize = false;         // restored below
    if (nchw) config.channels_last = false;  // the ONNX graph takes NCHW
    auto task = std::make_unique<TaskType>(config);
    const int64_t step = engine::restore_for_inference(*task, in.f.model_dir, in.checkpoint);
    return std::pair{std::move(task), step};
  };
  auto common_flags = [](FlagSet* c, Inference& in) {
    c->add_option("--model_dir", in.f.model_dir, "Model directory")->required();
    c->add_option("--checkpoint", in.checkpoint, "A checkpoint file (default: the latest)");
  };

  commands->verbs.push_back(
      {"eval", "Evaluate the latest (or a named) checkpoint on the validation shards", [=](FlagSet* c) {
         auto in = std::make_shared<Inference>();
         Traits::inference_defaults(in->f, /*predict=*/false);
         common_flags(c, *in);
         c->add_option("--data_dir", in->f.data_dir, "Data directory (default: the one used for training)");
         c->add_option("--batch_size", in->f.batch_size, "Batch size")->capture_default_str();
         Traits::add_inference_flags(c, in->f, /*predict=*/false);
         add_host_flags(c, in->f);
         c->add_option("--stats_file", in->stats_file, "Write the metrics as JSON here");
         return [=] {
           auto [task, step] = restore(*in, flags_given_to(*c), false);
           data::PipelineOptions o;
           o.file_pattern = Traits::validation_files(in->f);
           o.training = false;
           o.num_epochs = 1;
           o.batch_size = in->f.batch_size;
           nlohmann::json j = Traits::eval_report(evaluate_once(*task, in->f.model_dir, o, step));
           j["global_step"] = step;
           std::cout << j.dump() << std::endl;
           if (!in->stats_file.empty()) atomic_write_file(in->stats_file, j.dump(2) + "\n");
         };
       }});
  commands->verbs.push_back({"export", export_help, [=](FlagSet* c) {
                               auto e = std::make_shared<ExportFlags>();
                               add_export_flags(c, *e);
                               return [=] {
                                 Inference in;
                                 in.f.model_dir = e->model_dir;
                                 in.checkpoint = e->checkpoint;
                                 auto [task, step] = restore(in, no_flag_given, true);
                                 export_image_model(*task->module(), task->config().model.arch,
                                                    task->preprocess_options(), *e, step, Traits::kProbabilities);
                               };
                             }});
  commands->verbs.push_back(
      {"predict", predict_help, [=](FlagSet* c) {
         auto in = std::make_shared<Inference>();
         Traits::inference_defaults(in->f, /*predict=*/true);
         common_flags(c, *in);
         c->add_option("inputs", in->inputs, "Images, globs or directories")->required();
         Traits::add_inference_flags(c, in->f, /*predict=*/true);
         c->add_flag("--json", in->json_out, "One JSON line per image");
         c->add_option("--batch_size", in->f.batch_size, "Images per forward pass")->capture_default_str();
         add_host_flags(c, in->f);
         return [=] {
           auto [task, step] = restore(*in, flags_given_to(*c), false);
           const auto labels = data::read_labels(join_path(in->f.model_dir, "labels.txt"));
           const TaskType& restored = *task;
           predict_images(*task, task->preprocess_options(), in->inputs, in->f.batch_size,
                          [&](const std::vector<std::string>& files, const at::Tensor& logits) {
                            Traits::print_predictions(restored, files, logits, labels, in->f, in->json_out);
                          });
           std::cout.flush();
         };
       }});
}

// "class N" past the end of the label list.
inline std::string label_name(const std::vector<std::string>& labels, int64_t id) {
  return id < static_cast<int64_t>(labels.size()) ? labels[static_cast<size_t>(id)] : "class " + std::to_string(id);
}

}  // namespace orchard::tasks
