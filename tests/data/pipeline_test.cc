#include "orchard/data/pipeline.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/data/imagenet.h"

namespace orchard::data {
namespace {

using test::TempDir;

constexpr int kRecords = 50;
constexpr int kShardSizes[] = {9, 8, 8, 9, 8, 8};  // 6 shards, 50 records
constexpr int kSize = 8;                           // images are 8x8, output 8x8
constexpr float kMeans[3] = {123.68f, 116.78f, 103.94f};

// Record `id`: an 8x8 PNG whose red and green channels are solid and encode the id, with
// a marker in the blue channel's top-left corner so that crops and flips change the
// output; label id + 1 (the ImageNet schema is 1-based).
uint8_t red(int id) { return static_cast<uint8_t>(5 * id); }
uint8_t green(int id) { return static_cast<uint8_t>(3 * id + 1); }

std::string make_record(int id, int64_t label, const std::string& encoded = "") {
  Image im;
  im.height = im.width = kSize;
  im.pixels.resize(kSize * kSize * 3);
  for (int y = 0; y < kSize; ++y)
    for (int x = 0; x < kSize; ++x) {
      uint8_t* p = im.pixels.data() + (y * kSize + x) * 3;
      p[0] = red(id);
      p[1] = green(id);
      p[2] = (y < 3 && x < 3) ? 0 : static_cast<uint8_t>(200 - id);
    }
  tensorflow::Example ex;
  set_bytes(ex.mutable_features(), "image/encoded", encoded.empty() ? encode_png(im) : encoded);
  set_bytes(ex.mutable_features(), "image/format", "PNG");
  set_int64s(ex.mutable_features(), "image/class/label", {label});
  return ex.SerializeAsString();
}

void write_file(const std::string& path, const std::vector<std::string>& records) {
  TFRecordWriter w(path);
  for (const auto& r : records) w.write(r);
  w.close();
}

struct Output {
  std::vector<int64_t> labels;
  std::vector<float> images;
  std::vector<std::pair<int64_t, int64_t>> positions;  // (epoch, index_in_epoch) per batch
  std::vector<int64_t> sizes;
};

ImageNetParseOptions parse_options(bool training) {
  ImageNetParseOptions p;
  p.preprocess.image_size = kSize;
  p.training = training;
  p.num_classes = 100;
  return p;
}

Output run(const PipelineOptions& o, int64_t max_batches = -1) {
  Pipeline pipe(o, imagenet_spec(kSize, false), make_imagenet_parser(parse_options(o.training)));
  Output r;
  Batch b;
  while ((max_batches < 0 || static_cast<int64_t>(r.sizes.size()) < max_batches) && pipe.next(&b)) {
    EXPECT_EQ(b.images.sizes(), (at::IntArrayRef{b.size, 3, kSize, kSize}));
    const auto& labels = b.field("label");
    EXPECT_EQ(labels.numel(), b.size);
    EXPECT_EQ(b.images.scalar_type(), at::kFloat);
    EXPECT_EQ(labels.scalar_type(), at::kLong);
    EXPECT_EQ(b.sources.size(), static_cast<size_t>(b.size));
    const int64_t* l = labels.data_ptr<int64_t>();
    r.labels.insert(r.labels.end(), l, l + b.size);
    const float* im = b.images.data_ptr<float>();
    r.images.insert(r.images.end(), im, im + b.images.numel());
    r.positions.emplace_back(b.epoch, b.index_in_epoch);
    r.sizes.push_back(b.size);
  }
  return r;
}

// The red and green planes of every image must be the colour of its label's record.
void expect_images_match_labels(const Output& r) {
  const size_t plane = kSize * kSize;
  for (size_t i = 0; i < r.labels.size(); ++i) {
    const int id = static_cast<int>(r.labels[i]);
    const float* im = r.images.data() + i * 3 * plane;
    for (size_t k = 0; k < plane; ++k) {
      ASSERT_NEAR(im[k], red(id) - kMeans[0], 1e-3) << "sample " << i << " label " << id;
      ASSERT_NEAR(im[plane + k], green(id) - kMeans[1], 1e-3) << "sample " << i << " label " << id;
    }
  }
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> iota(int n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

using test::expect_data_error;

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    int id = 0;
    for (int s = 0; s < 6; ++s) {
      std::vector<std::string> records;
      for (int i = 0; i < kShardSizes[s]; ++i, ++id) records.push_back(make_record(id, id + 1));
      char name[64];
      std::snprintf(name, sizeof name, "train-%05d-of-00006", s);
      write_file(dir_->file(name), records);
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static PipelineOptions options(bool training) {
    PipelineOptions o;
    o.file_pattern = dir_->file("train-*-of-00006");
    o.training = training;
    o.batch_size = 6;
    o.num_epochs = training ? 2 : 1;
    o.num_threads = 2;
    o.cycle_length = 3;
    o.shuffle_buffer = 16;
    o.seed = 42;
    return o;
  }

  static TempDir* dir_;
};
TempDir* PipelineTest::dir_ = nullptr;

TEST_F(PipelineTest, FilesAndCount) {
  Pipeline pipe(options(false), imagenet_spec(kSize, false), make_imagenet_parser(parse_options(false)));
  ASSERT_EQ(pipe.files().size(), 6u);
  EXPECT_TRUE(std::is_sorted(pipe.files().begin(), pipe.files().end()));
  EXPECT_EQ(count_records(pipe.files(), {}), kRecords);
}

TEST_F(PipelineTest, EvalYieldsEveryRecordOnceWithAPartialLastBatch) {
  PipelineOptions o = options(false);
  o.batch_size = 4;
  const Output r = run(o);
  EXPECT_EQ(sorted(r.labels), iota(kRecords));
  ASSERT_EQ(r.sizes.size(), 13u);  // ceil(50 / 4)
  EXPECT_EQ(r.sizes.back(), 2);
  for (size_t i = 0; i < r.positions.size(); ++i) EXPECT_EQ(r.positions[i], (std::pair<int64_t, int64_t>{0, i}));
  expect_images_match_labels(r);
}

TEST_F(PipelineTest, WorkerShardsPartitionTheData) {
  for (int workers : {1, 2, 3, 4, 7}) {
    SCOPED_TRACE(::testing::Message() << workers << " workers");
    std::vector<int64_t> all;
    for (int w = 0; w < workers; ++w) {
      PipelineOptions o = options(false);
      o.num_workers = workers;
      o.worker_index = w;
      o.batch_size = 5;
      const Output r = run(o);
      EXPECT_FALSE(r.labels.empty()) << "worker " << w;
      expect_images_match_labels(r);
      all.insert(all.end(), r.labels.begin(), r.labels.end());
    }
    EXPECT_EQ(sorted(all), iota(kRecords));  // every record exactly once
  }
}

TEST_F(PipelineTest, SampleOneOfNKeepsEveryNthRecordOfTheReadOrder) {
  PipelineOptions o = options(false);
  o.batch_size = 50;
  const Output all = run(o);
  o.sample_1_of_n = 3;
  const Output some = run(o);
  std::vector<int64_t> expected;
  for (size_t i = 0; i < all.labels.size(); i += 3) expected.push_back(all.labels[i]);
  EXPECT_EQ(some.labels, expected);  // 17 of 50, in read order
}

TEST_F(PipelineTest, BadOptionsAreErrors) {
  PipelineOptions o = options(false);
  o.num_workers = 2;
  o.worker_index = 2;
  EXPECT_THROW(run(o), Error);
  o = options(false);
  o.batch_size = 0;
  EXPECT_THROW(run(o), Error);
  o = options(false);
  o.file_pattern = dir_->file("validation-*");
  EXPECT_THROW(run(o), Error);
}

TEST_F(PipelineTest, TrainingOrderDependsOnTheSeedNotTheThreadCount) {
  PipelineOptions o = options(true);
  o.num_threads = 1;
  const Output one = run(o);
  o.num_threads = 3;
  const Output three = run(o);

  // 50 / 6: 8 full batches per epoch, the partial one dropped.
  ASSERT_EQ(one.sizes.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(one.sizes[i], 6);
    EXPECT_EQ(one.positions[i],
              (std::pair<int64_t, int64_t>{static_cast<int64_t>(i / 8), static_cast<int64_t>(i % 8)}));
  }
  EXPECT_EQ(one.labels, three.labels);
  EXPECT_EQ(one.images, three.images);  // augmentation too
  expect_images_match_labels(one);

  const std::vector<int64_t> epoch0(one.labels.begin(), one.labels.begin() + 48);
  const std::vector<int64_t> epoch1(one.labels.begin() + 48, one.labels.end());
  for (const auto* e : {&epoch0, &epoch1}) {
    std::vector<int64_t> s = sorted(*e);
    EXPECT_EQ(std::unique(s.begin(), s.end()), s.end()) << "a record repeats within an epoch";
    EXPECT_NE(*e, s) << "not shuffled";
  }
  EXPECT_NE(epoch0, epoch1) << "same order in both epochs";

  const Output eval = run(options(false));
  EXPECT_NE(std::vector<int64_t>(eval.labels.begin(), eval.labels.begin() + 48), epoch0);

  // Augmentation is drawn per (epoch, position): a record's blue plane (which has the
  // corner marker) differs between its two epochs for most records.
  const size_t plane = kSize * kSize;
  auto blue = [&](const Output& r, size_t i) {
    const float* b = r.images.data() + i * 3 * plane + 2 * plane;
    return std::vector<float>(b, b + plane);
  };
  int changed = 0, seen_twice = 0;
  for (size_t i = 0; i < 48; ++i)
    for (size_t j = 48; j < 96; ++j)
      if (one.labels[i] == one.labels[j]) {
        ++seen_twice;
        changed += blue(one, i) != blue(one, j);
      }
  EXPECT_GT(seen_twice, 40);
  EXPECT_GT(changed, seen_twice / 2);

  o.seed = 43;
  const Output other = run(o);
  EXPECT_NE(other.labels, one.labels);
  EXPECT_EQ(other.labels.size(), one.labels.size());
}

TEST_F(PipelineTest, ResumeYieldsExactlyTheRemainingBatches) {
  const PipelineOptions o = options(true);
  const Output full = run(o);
  ASSERT_EQ(full.sizes.size(), 16u);
  const size_t per_sample = 3 * kSize * kSize;
  for (auto [epoch, batch] : {std::pair<int64_t, int64_t>{0, 3}, {1, 0}, {1, 5}}) {
    SCOPED_TRACE(::testing::Message() << "resume at epoch " << epoch << " batch " << batch);
    PipelineOptions r = o;
    r.start_epoch = epoch;
    r.start_batch = batch;
    r.num_threads = 3;
    const Output rest = run(r);
    const size_t skip = static_cast<size_t>(epoch * 8 + batch);
    ASSERT_EQ(rest.sizes.size(), full.sizes.size() - skip);
    using Positions = std::vector<std::pair<int64_t, int64_t>>;
    EXPECT_EQ(rest.positions, Positions(full.positions.begin() + skip, full.positions.end()));
    EXPECT_EQ(rest.labels, std::vector<int64_t>(full.labels.begin() + skip * 6, full.labels.end()));
    EXPECT_EQ(rest.images, std::vector<float>(full.images.begin() + skip * 6 * per_sample, full.images.end()));
  }
}

TEST_F(PipelineTest, CacheGivesTheSameOutput) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    PipelineOptions o = options(training);
    o.num_epochs = 3;
    const Output plain = run(o);
    o.cache = true;
    const Output cached = run(o);
    EXPECT_EQ(cached.labels, plain.labels);
    EXPECT_EQ(cached.images, plain.images);
    EXPECT_EQ(cached.positions, plain.positions);
    if (!training) {
      ASSERT_EQ(plain.labels.size(), 150u);
      EXPECT_EQ(std::vector<int64_t>(plain.labels.begin(), plain.labels.begin() + 50),
                std::vector<int64_t>(plain.labels.begin() + 50, plain.labels.begin() + 100));
    }
  }
}

TEST_F(PipelineTest, BatchesHeldByTheCallerAreNeverOverwritten) {
  // Whatever the pipeline does with memory, a batch (or a view of it) the caller still
  // holds keeps its values while later batches are produced.
  PipelineOptions o = options(true);
  o.num_epochs = 3;
  o.prefetch_batches = 1;
  const Output expected = run(o);
  Pipeline pipe(o, imagenet_spec(kSize, false), make_imagenet_parser(parse_options(true)));
  std::vector<Batch> held;
  std::vector<at::Tensor> views;
  Batch b;
  while (pipe.next(&b)) {
    views.push_back(b.images.narrow(0, 1, 2));  // a view: shares the storage
    held.push_back(b);
    b = Batch();
  }
  ASSERT_EQ(held.size(), expected.sizes.size());
  const int64_t per_sample = 3 * kSize * kSize;
  for (size_t i = 0; i < held.size(); ++i) {
    const float* want = expected.images.data() + i * 6 * per_sample;
    const float* got = held[i].images.data_ptr<float>();
    ASSERT_TRUE(std::equal(got, got + 6 * per_sample, want)) << "batch " << i;
    const at::Tensor v = views[i].contiguous();
    ASSERT_TRUE(std::equal(v.data_ptr<float>(), v.data_ptr<float>() + 2 * per_sample, want + per_sample))
        << "view of batch " << i;
  }
}

TEST_F(PipelineTest, StopsCleanlyInTheMiddleOfAnEndlessStream) {
  PipelineOptions o = options(true);
  o.num_epochs = -1;
  o.prefetch_batches = 2;
  const Output r = run(o, 20);  // more than two epochs, then the destructor runs
  EXPECT_EQ(r.sizes.size(), 20u);
  EXPECT_EQ(r.positions.back(), (std::pair<int64_t, int64_t>{2, 3}));
}

TEST(PipelineErrors, LabelOutOfRangeNamesFileAndRecord) {
  TempDir dir;
  // Record 2 has label 0 (labels are 1-based); in the other file record 1 has 101 > 100 classes.
  write_file(dir.file("zero"), {make_record(0, 1), make_record(1, 2), make_record(2, 0)});
  write_file(dir.file("big"), {make_record(0, 1), make_record(1, 101)});
  for (auto [file, record] : {std::pair<std::string, std::string>{"zero", "record 2"}, {"big", "record 1"}}) {
    for (bool training : {false, true}) {
      PipelineOptions o;
      o.file_pattern = dir.file(file);
      o.training = training;
      o.batch_size = 1;
      o.num_epochs = 1;
      o.num_threads = 2;
      expect_data_error([&] { run(o); }, {dir.file(file), record, "image/class/label"});
    }
  }
}

TEST(PipelineErrors, UndecodableImageNamesFileAndRecord) {
  TempDir dir;
  write_file(dir.file("bad"), {make_record(0, 1), make_record(1, 2, "GIF89a not supported")});
  PipelineOptions o;
  o.file_pattern = dir.file("bad");
  o.training = false;
  o.batch_size = 2;
  o.num_epochs = 1;
  expect_data_error([&] { run(o); }, {dir.file("bad"), "record 1"});
}

// With skip_corrupt_records an undecodable image is skipped like a record with a bad CRC:
// its batch is one sample smaller, and it is counted once however many epochs meet it.
TEST(PipelineErrors, UndecodableImagesAreSkippedAndCountedOnceWithSkipCorruptRecords) {
  TempDir dir;
  write_file(dir.file("mixed"),
             {make_record(0, 1), make_record(1, 2, "GIF89a not supported"), make_record(2, 3), make_record(3, 4)});
  PipelineOptions o;
  o.file_pattern = dir.file("mixed");
  o.training = false;
  o.batch_size = 2;
  o.num_epochs = 3;
  o.num_threads = 2;
  o.reader.skip_corrupt_records = true;
  Pipeline pipe(o, imagenet_spec(kSize, false), make_imagenet_parser(parse_options(false)));
  std::vector<int64_t> labels;
  std::vector<std::string> sources;
  Batch b;
  while (pipe.next(&b)) {
    labels.insert(labels.end(), b.field("label").data_ptr<int64_t>(), b.field("label").data_ptr<int64_t>() + b.size);
    sources.insert(sources.end(), b.sources.begin(), b.sources.end());
    EXPECT_EQ(b.images.size(0), b.size);
  }
  EXPECT_EQ(labels, (std::vector<int64_t>{0, 2, 3, 0, 2, 3, 0, 2, 3}));  // image of id i has label i (0-based)
  EXPECT_EQ(sources[1], dir.file("mixed") + ": record 2");               // the rows and their sources stay together
  ASSERT_EQ(pipe.skipped_records(), 1);
  EXPECT_NE(pipe.skipped()[0].find(dir.file("mixed") + ": record 1"), std::string::npos) << pipe.skipped()[0];
}

// A record with a bad CRC met in each of 3 epochs was reported as 3 skipped records.
TEST(PipelineErrors, ABadCrcIsCountedOnceOverEpochs) {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 4; ++i) records.push_back(make_record(i, i + 1));
  write_file(dir.file("f"), records);
  std::string bytes = test::read_bytes(dir.file("f"));
  bytes[12 + records[0].size() / 2] ^= 0x20;  // record 0's data
  test::write_bytes(dir.file("f"), bytes);
  PipelineOptions o;
  o.file_pattern = dir.file("f");
  o.training = true;
  o.batch_size = 1;
  o.num_epochs = 3;
  o.reader.skip_corrupt_records = true;
  Pipeline pipe(o, imagenet_spec(kSize, false), make_imagenet_parser(parse_options(true)));
  Batch b;
  int batches = 0;
  while (pipe.next(&b)) ++batches;
  EXPECT_EQ(batches, 9);
  EXPECT_EQ(pipe.skipped_records(), 1);
}

// After a data error nobody will see the rest of the queued work: it is cancelled, not decoded.
TEST(PipelineErrors, ADataErrorCancelsTheQueuedParseWork) {
  TempDir dir;
  std::vector<std::string> records = {make_record(0, 1, "not an image")};
  for (int i = 1; i < 400; ++i) records.push_back(make_record(i % 50, i % 50 + 1));
  write_file(dir.file("f"), records);
  PipelineOptions o;
  o.file_pattern = dir.file("f");
  o.training = false;
  o.batch_size = 100;
  o.num_epochs = 1;
  o.num_threads = 1;
  o.prefetch_batches = 4;
  auto parsed = std::make_shared<std::atomic<int>>(0);
  const ParseFn real = make_imagenet_parser(parse_options(false));
  const ParseFn slow = [real, parsed](const std::string& bytes, const std::string& source, std::mt19937_64& rng,
                                      const SampleOut& out) {
    parsed->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    real(bytes, source, rng, out);
  };
  {
    Pipeline pipe(o, imagenet_spec(kSize, false), slow);
    Batch b;
    expect_data_error([&] { pipe.next(&b); }, {dir.file("f"), "record 0"});
  }
  EXPECT_LT(parsed->load(), 200) << "queued batches were decoded after the error";
}

TEST(PipelineErrors, CorruptRecordIsAnErrorOrSkippedAndCounted) {
  TempDir dir;
  std::vector<std::string> good, bad;
  for (int i = 0; i < 5; ++i) good.push_back(make_record(i, i + 1));
  for (int i = 5; i < 10; ++i) bad.push_back(make_record(i, i + 1));
  write_file(dir.file("a-good"), good);
  write_file(dir.file("b-bad"), bad);
  // Flip a byte in the middle of record 2 (id 7) of the bad file.
  std::string bytes = test::read_bytes(dir.file("b-bad"));
  const size_t start = 2 * (bad[0].size() + 16);  // all records have the same size
  ASSERT_EQ(bad[0].size(), bad[2].size());
  bytes[start + 12 + bad[2].size() / 2] ^= 0x20;
  test::write_bytes(dir.file("b-bad"), bytes);

  PipelineOptions o;
  o.file_pattern = dir.file("*");
  o.training = false;
  o.batch_size = 3;
  o.num_epochs = 1;
  o.num_threads = 2;
  expect_data_error([&] { run(o); }, {dir.file("b-bad"), "record 2", "CRC"});

  o.reader.skip_corrupt_records = true;
  Pipeline pipe(o, imagenet_spec(kSize, false), make_imagenet_parser(parse_options(false)));
  std::vector<int64_t> labels;
  Batch b;
  while (pipe.next(&b))
    labels.insert(labels.end(), b.field("label").data_ptr<int64_t>(), b.field("label").data_ptr<int64_t>() + b.size);
  EXPECT_EQ(sorted(labels), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 8, 9}));
  EXPECT_EQ(pipe.skipped_records(), 1);
  EXPECT_FALSE(pipe.next(&b));  // stays at the end
}

TEST(BufferedShuffle, IsAPermutationLimitedByTheBuffer) {
  std::vector<std::string> items;
  for (int i = 0; i < 50; ++i) items.push_back(std::to_string(i));
  std::mt19937_64 rng(1);
  EXPECT_EQ(buffered_shuffle(items, 1, rng), items);  // a buffer of one keeps the order
  std::set<std::vector<std::string>> orders;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 r(seed), again(seed);
    const auto out = buffered_shuffle(items, 4, r);
    EXPECT_EQ(out, buffered_shuffle(items, 4, again));
    auto sorted = out;
    std::sort(sorted.begin(), sorted.end());
    auto want = items;
    std::sort(want.begin(), want.end());
    ASSERT_EQ(sorted, want) << "not a permutation";
    // With a buffer of 4, the k-th output is one of the first k + 4 inputs.
    for (size_t k = 0; k < out.size(); ++k) ASSERT_LT(std::stoi(out[k]), static_cast<int>(k) + 4) << "position " << k;
    orders.insert(out);
  }
  EXPECT_GT(orders.size(), 15u);
}

TEST(MixSeed, IsDeterministicAndSpreads) {
  EXPECT_EQ(mix_seed(1, 2, 3), mix_seed(1, 2, 3));
  EXPECT_NE(mix_seed(1, 2, 3), mix_seed(1, 2, 4));
  EXPECT_NE(mix_seed(1, 2, 3), mix_seed(2, 1, 3));
  EXPECT_NE(mix_seed(0, 0, 0), 0u);
}

}  // namespace
}  // namespace orchard::data
