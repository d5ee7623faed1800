// The task registry as the CLI sees it, through a FlagSet that records declarations instead
// of parsing: which tasks and verbs exist, that each verb declares its flags (the seed's
// names) once, and that registration refuses a second task of the same name.
#include "orchard/tasks/registry.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::tasks {
namespace {

class RecordingFlagSet : public FlagSet {
 public:
  struct Recorded : Flag {
    bool is_required = false;
    Flag* capture_default_str() override { return this; }
    Flag* required() override {
      is_required = true;
      return this;
    }
    Flag* group(const std::string&) override { return this; }
    Flag* check_member(const std::vector<std::string>&) override { return this; }
  };
  Flag* add_option(const std::string& n, std::string&, const std::string&) override { return add(n); }
  Flag* add_option(const std::string& n, int&, const std::string&) override { return add(n); }
  Flag* add_option(const std::string& n, int64_t&, const std::string&) override { return add(n); }
  Flag* add_option(const std::string& n, uint64_t&, const std::string&) override { return add(n); }
  Flag* add_option(const std::string& n, double&, const std::string&) override { return add(n); }
  Flag* add_option(const std::string& n, std::vector<std::string>&, const std::string&) override { return add(n); }
  Flag* add_option(const std::string& n, bool&, const std::string&) override { return add(n); }
  Flag* add_flag(const std::string& n, bool&, const std::string&) override { return add(n); }
  bool given(const std::string&) const override { return false; }

  std::vector<std::string> names;         // every name and alias, in declaration order
  std::map<std::string, Recorded> flags;  // by first name

 private:
  Flag* add(const std::string& spec) {
    std::stringstream in(spec);
    std::string name, first;
    while (std::getline(in, name, ',')) {
      if (first.empty()) first = name;
      names.push_back(name);
    }
    return &flags[first];
  }
};

const TaskCommands& task(const std::string& name) {
  register_builtin_tasks();
  for (const auto& t : registered_tasks())
    if (t.name == name) return t;
  throw Error("no task " + name);
}

std::vector<std::string> verbs(const std::string& name) {
  std::vector<std::string> v;
  for (const auto& verb : task(name).verbs) v.push_back(verb.name);
  return v;
}

RecordingFlagSet declared(const std::string& task_name, const std::string& verb_name) {
  for (const auto& verb : task(task_name).verbs)
    if (verb.name == verb_name) {
      RecordingFlagSet flags;
      EXPECT_TRUE(verb.define(&flags) != nullptr);
      return flags;
    }
  throw Error("no verb " + verb_name);
}

TEST(TaskRegistry, TheFourSeedTasksWithTheirVerbs) {
  register_builtin_tasks();
  register_builtin_tasks();  // a second call registers nothing again
  std::vector<std::string> names;
  for (const auto& t : registered_tasks()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"classify", "multilabel", "detect", "caption"}));
  const std::vector<std::string> image_verbs = {"train", "eval", "export", "predict"};
  EXPECT_EQ(verbs("classify"), image_verbs);
  EXPECT_EQ(verbs("multilabel"), image_verbs);
  EXPECT_EQ(verbs("detect"), (std::vector<std::string>{"train", "eval", "export", "predict"}));
  EXPECT_EQ(verbs("caption"), (std::vector<std::string>{"train", "eval", "run", "predict"}));
  ASSERT_EQ(registered_commands().size(), 1u);
  EXPECT_EQ(registered_commands()[0].name, "import-weights");
}

TEST(TaskRegistry, EveryVerbDeclaresEachFlagOnce) {
  for (const auto& t : registered_tasks())
    for (const auto& verb : t.verbs) {
      const auto flags = declared(t.name, verb.name);
      std::set<std::string> seen;
      for (const auto& n : flags.names) EXPECT_TRUE(seen.insert(n).second) << t.name << " " << verb.name << ": " << n;
      EXPECT_FALSE(flags.names.empty()) << t.name << " " << verb.name;
    }
}

TEST(TaskRegistry, TheSeedsFlagNamesAreDeclared) {
  const auto names = [](const RecordingFlagSet& f) { return std::set<std::string>(f.names.begin(), f.names.end()); };
  const auto classify = names(declared("classify", "train"));
  for (const char* flag : {"--data_dir", "--dd", "--model_dir", "--md", "--batch_size", "--bs", "--train_epochs",
                           "--epochs_between_evals", "--use_synthetic_data", "--num_gpus", "--distribution_strategy",
                           "--ds", "--enable_checkpoint_and_export", "--log_steps", "--num_threads", "--dtype"})
    EXPECT_TRUE(classify.count(flag)) << flag;
  const auto multilabel = names(declared("multilabel", "train"));
  for (const char* flag : {"--data_dir", "--model_dir", "--batch_size", "--class_num", "--mask_thres", "--neg_select",
                           "--lr", "--lr_decay_step", "--warmup_step", "--max_iter", "--snapshot", "--pretrain_ckpt"})
    EXPECT_TRUE(multilabel.count(flag)) << flag;
  const auto detect = names(declared("detect", "train"));
  for (const char* flag : {"--pipeline_config_path", "--model_dir", "--num_train_steps",
                           "--sample_1_of_n_eval_examples", "--checkpoint_dir", "--run_once"})
    EXPECT_TRUE(detect.count(flag)) << flag;
  const auto caption = names(declared("caption", "train"));
  for (const char* flag : {"--input_file_pattern", "--inception_checkpoint_file", "--train_dir", "--train_inception",
                           "--number_of_steps", "--log_every_n_steps"})
    EXPECT_TRUE(caption.count(flag)) << flag;
  // eval/predict restore a model_dir: it is required there.
  EXPECT_TRUE(declared("classify", "eval").flags.at("--model_dir").is_required);
  EXPECT_TRUE(declared("multilabel", "predict").flags.at("--model_dir").is_required);
}

TEST(TaskRegistry, ASecondTaskOfTheSameNameIsRefused) {
  register_builtin_tasks();
  EXPECT_THROW(register_task({"classify", "again", {}}), Error);
  EXPECT_THROW(register_command({"import-weights", "again", {}}), Error);
}

}  // namespace
}  // namespace orchard::tasks
