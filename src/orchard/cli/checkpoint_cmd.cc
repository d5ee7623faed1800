// `orchard checkpoint inspect|export`: TensorFlow checkpoints listed and mapped onto Orchard's
// models (tasks/checkpoint_inspect.h), and a model_dir written as one (its task's export).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "orchard/cli/commands.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/tasks/checkpoint_inspect.h"

namespace orchard::cli {
namespace {

struct ExportOptions {
  std::string model_dir, out, checkpoint, format = "tf";
};

// `checkpoint export`: the model_dir's task's own `export --format tf`, run in this process's
// place (the task knows how to rebuild its model from the model_dir).
void run_export(const ExportOptions& o) {
  if (o.format != "tf") throw Error("--format must be tf, not '" + o.format + "' (ONNX: orchard <task> export)");
  const std::string config = join_path(o.model_dir, "config.json");
  if (!file_exists(config)) throw Error(o.model_dir + ": no config.json (not an Orchard model_dir)");
  const std::string task = nlohmann::json::parse(read_file(config)).value("task", "");
  if (task != "classify" && task != "multilabel" && task != "detect")
    throw Error(o.model_dir + ": a " + (task.empty() ? "model_dir without a task" : task + " model") +
                "; TensorFlow export covers classify, multilabel and detect models");
  std::vector<std::string> args{"orchard",  task, "export", "--model_dir", o.model_dir,
                                "--format", "tf", "--out",  o.out};
  if (!o.checkpoint.empty()) args.insert(args.end(), {"--checkpoint", o.checkpoint});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  throw Error(std::string("cannot run orchard ") + task + " export: " + std::strerror(errno));
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("checkpoint", "TensorFlow checkpoints: list, map onto Orchard models, write");
  cmd->require_subcommand(1);
  {
    auto o = std::make_shared<tasks::CheckpointInspectOptions>();
    auto* c = cmd->add_subcommand(
        "inspect", "Variables of a TensorFlow checkpoint (V2 bundle or V1 TensorSlice): names, dtypes, shapes");
    c->add_option("path", o->path,
                  "The checkpoint: a prefix (model.ckpt, model.ckpt-1000), one of its files, or a directory")
        ->required();
    c->add_flag("--json", o->json, "One JSON document instead of text");
    c->add_flag("--stats", o->stats, "Also each variable's min, max, mean and std (reads the data shards)");
    c->add_option("--tensor", o->tensor, "Only this variable, with its values (inspect_checkpoint --tensor_name)");
    c->add_option("--map", o->map,
                  "Also match the variables with this Orchard model's (mobilenet_v2, inception_v3: TF-Slim's names)");
    c->add_option("--pipeline_config_path", o->pipeline_config_path,
                  "Match them with this pipeline.config's detection model (its fine_tune_checkpoint_type chooses "
                  "the names)");
    c->add_option("--num_classes", o->num_classes, "With --map: the classifier's classes (default: the checkpoint's)");
    c->callback([o] {
      if (!o->map.empty() && !o->pipeline_config_path.empty())
        throw Error("--map and --pipeline_config_path: give one");
      tasks::inspect_checkpoint(*o);
    });
  }
  {
    auto o = std::make_shared<ExportOptions>();
    auto* c = cmd->add_subcommand(
        "export",
        "A model_dir's model as a TensorFlow V2 checkpoint under TensorFlow's names (= <task> export --format tf)");
    c->add_option("--model_dir", o->model_dir, "An Orchard model_dir (classify, multilabel, detect)")->required();
    c->add_option("--out", o->out, "The checkpoint prefix to write, e.g. out/model.ckpt")->required();
    c->add_option("--checkpoint", o->checkpoint, "An Orchard checkpoint file (default: the latest)");
    c->add_option("--format", o->format, "tf")->capture_default_str();
    c->callback([o] { run_export(*o); });
  }
}

}  // namespace orchard::cli
