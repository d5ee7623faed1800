// The engine (src/orchard/engine) driven by a fake task: a linear model on synthetic batches
// that are a pure function of their position, so runs can be compared exactly.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/engine/loop.h"
#include "orchard/engine/signals.h"
#include "orchard/engine/trainer.h"
#include "orchard/train/checkpoint.h"

namespace orchard::engine {
namespace {

namespace stdfs = std::filesystem;

// The fake task's outputs: the predictions y [B, 1].
struct FakeOutputs : tasks::Outputs {
  torch::Tensor y;
};

// y = x . w_true; the model learns w with a squared loss. Counts its evaluations.
class FakeTask : public tasks::Task {
 public:
  FakeTask() { torch::manual_seed(0), linear_ = torch::nn::Linear(torch::nn::LinearOptions(4, 1).bias(false)); }
  std::string name() const override { return "fake"; }
  std::shared_ptr<torch::nn::Module> module() override { return linear_.ptr(); }
  std::unique_ptr<tasks::Outputs> forward(const data::Batch& batch, tasks::Pass) override {
    auto outputs = std::make_unique<FakeOutputs>();
    outputs->y = linear_(batch.images);
    return outputs;
  }
  data::SampleSpec sample_spec() const override { return {{4}, {{"y", at::kFloat, {1}}}}; }
  data::ParseFn parser(bool) const override { return {}; }
  tasks::Loss loss(const tasks::Outputs& outputs, const data::Batch& batch, int64_t) override {
    tasks::Loss loss;
    loss.data = (tasks::outputs_as<FakeOutputs>(outputs).y - batch.field("y")).pow(2).mean();
    return loss;
  }
  void train_metrics(const tasks::Outputs&, const data::Batch&, const tasks::Loss& loss,
                     tasks::MetricSums* sums) const override {
    tasks::add_training_loss(loss, sums);
  }
  void eval_step(const tasks::Outputs&, const data::Batch& batch, const tasks::Loss& loss,
                 tasks::MetricSums* sums) override {
    sums->add("loss_sum", loss.total() * batch.size);
    sums->add("count", static_cast<double>(batch.size));
  }
  std::map<std::string, double> compute_metrics(const tasks::MetricSums& s, bool training) const override {
    if (training) return {{"loss", tasks::training_loss(s)}};
    ++evaluations;
    return {{"loss", s.get("loss_sum") / s.get("count")}};
  }
  std::map<std::string, std::string> signature() const override { return {{"model", "fake"}}; }

  mutable int evaluations = 0;

 private:
  torch::nn::Linear linear_{nullptr};
};

data::Batch batch_at(int64_t position, int64_t steps_per_epoch) {
  torch::manual_seed(1000 + position);
  data::Batch b;
  b.images = torch::randn({8, 4});
  b.fields["y"] = b.images.matmul(torch::tensor({1.0f, -2.0f, 0.5f, 3.0f})).unsqueeze(1);
  b.size = 8;
  b.epoch = position / steps_per_epoch;
  b.index_in_epoch = position % steps_per_epoch;
  return b;
}

struct InputLog {
  std::vector<std::pair<int64_t, int64_t>> starts;  // (epoch, batch) the input was positioned at
};

TrainInputFactory train_input(InputLog* run, int64_t spe) {
  return [run, spe](int64_t epoch, int64_t batch) {
    run->starts.emplace_back(epoch, batch);
    auto pos = std::make_shared<int64_t>(epoch * spe + batch);
    return BatchSource([pos, spe](data::Batch* b) {
      *b = batch_at((*pos)++, spe);
      return true;
    });
  };
}

EvalInputFactory eval_input() {
  return [] {
    auto n = std::make_shared<int>(0);
    return BatchSource([n](data::Batch* b) {
      if (*n == 2) return false;
      *b = batch_at(-1 - (*n)++, 1);
      return true;
    });
  };
}

TrainerOptions options(const std::string& dir, int64_t total) {
  TrainerOptions o;
  o.model_dir = dir;
  o.global_batch_size = 8;
  o.steps_per_epoch = 4;
  o.total_steps = total;
  o.steps_per_loop = 2;
  o.eval_every = 5;
  o.enable_checkpoints = true;
  o.checkpoint_every = 4;
  o.max_to_keep = 100;
  o.enable_tensorboard = false;
  o.log_steps = 3;
  return o;
}

std::unique_ptr<torch::optim::Optimizer> sgd(FakeTask& t) {
  return std::make_unique<torch::optim::SGD>(t.module()->parameters(), torch::optim::SGDOptions(0.0).momentum(0.9));
}

std::vector<int64_t> checkpoint_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  for (const auto& [step, path] : train::CheckpointManager(dir).list()) steps.push_back(step);
  return steps;
}

// Records every call, "name@step".
class Recorder : public Hook {
 public:
  explicit Recorder(std::vector<std::string>* log) : log_(log) {}
  void before_train(TrainState& s) override { add("before_train", s); }
  void before_loop(TrainState& s) override { add("before_loop", s); }
  void before_step(TrainState& s) override { add("before_step", s); }
  void after_step(TrainState& s) override { add("after_step", s); }
  void after_loop(TrainState& s) override { add("after_loop", s); }
  void after_train(TrainState& s) override { add("after_train", s); }
  void before_backward(TrainState& s, at::Tensor&) override { add("before_backward", s); }
  bool after_backward(TrainState& s) override {
    add("after_backward", s);
    return true;
  }
  void on_signal(TrainState& s, int signal) override { add("on_signal" + std::to_string(signal), s); }

 private:
  void add(const std::string& what, const TrainState& s) { log_->push_back(what + "@" + std::to_string(s.step)); }
  std::vector<std::string>* log_;
};

TEST(Loop, HookOrderAndLoopsCutWhereAnEvaluationIsDue) {
  std::vector<std::string> log;
  TrainState state;
  state.total_steps = 10;
  LoopOptions o;
  o.steps_per_loop = 3;
  o.eval_every = 4;
  std::vector<std::shared_ptr<Hook>> hooks = {std::make_shared<Recorder>(&log)};
  run_loop(
      o, state, [&](TrainState& s) { log.push_back("step@" + std::to_string(s.step)); }, hooks);
  EXPECT_EQ(state.step, 10);
  std::vector<std::string> want = {"before_train@0", "before_loop@0"};
  const std::vector<int64_t> loop_ends = {3, 4, 6, 8, 9, 10};
  int64_t step = 0;
  for (size_t i = 0; i < loop_ends.size(); ++i) {
    if (i > 0) want.push_back("before_loop@" + std::to_string(step));
    for (; step < loop_ends[i]; ++step) {
      want.push_back("before_step@" + std::to_string(step));
      want.push_back("step@" + std::to_string(step));
      want.push_back("after_step@" + std::to_string(step + 1));
    }
    want.push_back("after_loop@" + std::to_string(step));
  }
  want.push_back("after_train@10");
  EXPECT_EQ(log, want);
}

// Around the backward pass the hooks run in order, then in reverse; one veto skips the
// optimizer step (what loss scaling does with non-finite gradients).
TEST(Trainer, HooksAroundBackwardRunInOrderThenInReverseAndMayVeto) {
  struct Named : Hook {
    Named(std::string n, std::vector<std::string>* o) : name(std::move(n)), out(o) {}
    void before_backward(TrainState&, at::Tensor&) override { out->push_back("before:" + name); }
    bool after_backward(TrainState&) override {
      out->push_back("after:" + name);
      return name != "veto";
    }
    std::string name;
    std::vector<std::string>* out;
  };
  FakeTask task;
  const auto initial = task.module()->parameters()[0].detach().clone();
  test::TempDir dir;
  auto o = options(dir.path().string(), 1);
  o.enable_checkpoints = false;
  o.skip_eval = true;
  Trainer trainer(o, task, sgd(task), [](int64_t) { return 0.1; });
  std::vector<std::string> order;
  trainer.register_hooks({std::make_shared<Named>("first", &order), std::make_shared<Named>("veto", &order)});
  InputLog run;
  trainer.train_and_evaluate(train_input(&run, 4), {});
  EXPECT_EQ(order, (std::vector<std::string>{"before:first", "before:veto", "after:veto", "after:first"}));
  EXPECT_TRUE(torch::equal(task.module()->parameters()[0], initial));  // the step was skipped
}

TEST(Trainer, CheckpointAndEvaluationCadence) {
  FakeTask task;
  test::TempDir dir;
  InputLog run;
  Trainer trainer(options(dir.path().string(), 12), task, sgd(task), [](int64_t) { return 0.02; });
  const auto stats = trainer.train_and_evaluate(train_input(&run, 4), eval_input());
  // Loops (2 steps, cut at multiples of 5) end at 2, 4, 5, 6, 8, 10, 12: checkpoints at
  // multiples of 4 and the end, evaluations at multiples of 5 and once at the end.
  EXPECT_EQ(checkpoint_steps(dir.path().string()), (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(task.evaluations, 3);
  EXPECT_EQ(stats.global_step, 12);
  EXPECT_TRUE(stats.eval.count("loss"));
  EXPECT_TRUE(stats.train.count("loss"));
  EXPECT_EQ(run.starts, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}}));
  EXPECT_EQ(stats.step_timestamp_log.size(), 4u);  // log_steps 3: 3, 6, 9, 12
}

torch::Tensor weights(FakeTask& t) { return t.module()->parameters()[0].detach().clone(); }

// Trains a fresh fake task in `dir` up to `total` steps (resuming what is there); returns
// its weights and where its input started.
torch::Tensor train_to(const std::string& dir, int64_t total, InputLog* log = nullptr,
                       const std::vector<std::shared_ptr<Hook>>& extra = {}) {
  FakeTask task;
  InputLog own;
  Trainer trainer(options(dir, total), task, sgd(task), [](int64_t) { return 0.02; });
  trainer.register_hooks(extra);
  trainer.train_and_evaluate(train_input(log ? log : &own, 4), eval_input());
  return weights(task);
}

TEST(Trainer, ResumesAtTheCheckpointsPositionWithTheSameResult) {
  test::TempDir full_dir, split_dir;
  const auto full = train_to(full_dir.path().string(), 12);
  train_to(split_dir.path().string(), 6);
  InputLog second;
  const auto resumed = train_to(split_dir.path().string(), 12, &second);
  EXPECT_EQ(second.starts, (std::vector<std::pair<int64_t, int64_t>>{{1, 2}}));  // step 6 = epoch 1, batch 2
  EXPECT_EQ(checkpoint_steps(split_dir.path().string()), (std::vector<int64_t>{4, 6, 8, 12}));
  EXPECT_TRUE(torch::equal(resumed, full)) << resumed << full;
}

// Raises SIGTERM during one step, as a preempting machine would.
class SignalAt : public Hook {
 public:
  explicit SignalAt(int64_t step) : step_(step) {}
  void before_step(TrainState& s) override {
    if (s.step == step_) std::raise(SIGTERM);
  }

 private:
  int64_t step_;
};

TEST(Trainer, StopSignalFinishesTheStepSavesAndResumes) {
  install_stop_handlers();
  clear_stop_signal();
  test::TempDir full_dir, dir;
  const auto full = train_to(full_dir.path().string(), 12);
  // The signal arrives in step 6 (0-based, mid-loop): that step finishes, a checkpoint of
  // step 7 is written, and the run ends with Interrupted.
  try {
    train_to(dir.path().string(), 12, nullptr, {std::make_shared<SignalAt>(6)});
    FAIL() << "no Interrupted";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    EXPECT_NE(std::string(e.what()).find("after step 7"), std::string::npos) << e.what();
  }
  EXPECT_EQ(checkpoint_steps(dir.path().string()), (std::vector<int64_t>{4, 7}));
  clear_stop_signal();

  InputLog second;
  const auto resumed = train_to(dir.path().string(), 12, &second);
  EXPECT_EQ(second.starts, (std::vector<std::pair<int64_t, int64_t>>{{1, 3}}));
  EXPECT_TRUE(torch::equal(resumed, full));
}

// A damaged newest checkpoint (truncated by a dying machine, or a flipped byte that fails its
// zip CRC-32) is reported by name and the one before it resumed from; it blocked the job.
TEST(Trainer, ADamagedNewestCheckpointIsSkippedForThePreviousOne) {
  test::TempDir full_dir;
  const auto full = train_to(full_dir.path().string(), 12);
  for (const std::string damage : {"truncated", "flipped"}) {
    SCOPED_TRACE(damage);
    test::TempDir dir;
    const torch::Tensor at8 = train_to(dir.path().string(), 8).contiguous();
    ASSERT_EQ(checkpoint_steps(dir.path().string()), (std::vector<int64_t>{4, 8}));
    const std::string newest = train::CheckpointManager(dir.path().string()).latest();
    std::string bytes = test::read_bytes(newest);
    if (damage == "truncated") {
      bytes.resize(bytes.size() / 2);
    } else {  // a bit of the stored weights: the archive's framing is intact, libtorch reads it
      const std::string raw(static_cast<const char*>(at8.data_ptr()), at8.numel() * at8.element_size());
      const size_t at = bytes.find(raw);
      ASSERT_NE(at, std::string::npos);
      bytes[at + 1] ^= 0x10;
    }
    test::write_bytes(newest, bytes);
    InputLog second;
    const auto resumed = train_to(dir.path().string(), 12, &second);
    EXPECT_EQ(second.starts, (std::vector<std::pair<int64_t, int64_t>>{{1, 0}}));  // step 4
    EXPECT_TRUE(torch::equal(resumed, full));
  }
}

// A preempted job rerun as it was reaches the uninterrupted run's weights whatever step the
// signal came in: steps drawn at random (fixed seed), mid-loop and at loop ends alike.
TEST(Trainer, TerminatedAtRandomStepsAndRerunMatchesTheUninterruptedRun) {
  install_stop_handlers();
  test::TempDir full_dir;
  const auto full = train_to(full_dir.path().string(), 12);
  std::mt19937 rng(31);
  std::set<int64_t> steps = {0, 11};  // the first and the last step too
  while (steps.size() < 6) steps.insert(std::uniform_int_distribution<int64_t>(0, 11)(rng));
  for (const int64_t at : steps) {
    SCOPED_TRACE(at);
    clear_stop_signal();
    test::TempDir dir;
    EXPECT_THROW(train_to(dir.path().string(), 12, nullptr, {std::make_shared<SignalAt>(at)}), Interrupted);
    EXPECT_EQ(train::checkpoint_step(train::CheckpointManager(dir.path().string()).latest()), at + 1);
    clear_stop_signal();
    EXPECT_TRUE(torch::equal(train_to(dir.path().string(), 12), full));
  }
}

// The first SIGTERM/SIGINT asks for a stop after the step; a second one exits at once with
// 128 + signal (a user pressing Ctrl-C twice, a scheduler that will not wait).
TEST(Signals, ASecondSignalExitsAtOnce) {
  for (const int sig : {SIGTERM, SIGINT}) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the child: only async-signal-safe calls from here on
      clear_stop_signal();
      install_stop_handlers();
      std::raise(sig);
      if (stop_signal() != sig) _exit(3);  // the first one only asks
      std::raise(sig);
      _exit(0);  // not reached when the second signal exits
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
  }
}

TEST(Evaluator, EvaluatesWithoutAnOptimizer) {
  FakeTask task;
  test::TempDir dir;
  EvaluatorOptions o;
  o.model_dir = dir.path().string();
  o.enable_tensorboard = true;
  Evaluator evaluator(o, task);
  const auto m = evaluator.evaluate(eval_input(), 3, /*summaries=*/true);
  EXPECT_GT(m.at("loss"), 0);
  EXPECT_EQ(task.evaluations, 1);
  EXPECT_TRUE(stdfs::is_directory(stdfs::path(dir.path().string()) / "eval"));
}

}  // namespace
}  // namespace orchard::engine
