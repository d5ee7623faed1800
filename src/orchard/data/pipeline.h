// The input pipeline, on C++ threads:
//   list shards -> (training) shuffle file order per epoch -> shard by worker ->
//   interleave reads over cycle_length files -> (training) shuffle buffer of raw records ->
//   parse + decode + augment on a thread pool -> batch into one contiguous tensor ->
//   prefetch a few batches ahead.
// Output order and augmentation are a pure function of (seed, epoch, position): the same
// for any thread count, which is what makes resume exact.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "orchard/core/tfrecord.h"

namespace orchard::data {

// One named, typed field a task's parser writes per record besides the image (a class, a
// label vector, boxes padded to a maximum with their count, caption ids, an image id...).
// Batched as [B, *shape] of `dtype`.
struct FieldSpec {
  std::string name;
  at::ScalarType dtype = at::kFloat;  // kFloat, kLong or kBool
  std::vector<int64_t> shape;         // per sample; {} for a scalar
};

// Shapes of what a task's parser writes for one record.
struct SampleSpec {
  std::vector<int64_t> image_shape;  // e.g. {3, 224, 224} or {224, 224, 3}
  std::vector<FieldSpec> fields;
};

// Where a parser writes one record: prod(image_shape) floats at `image`, and each field of
// the spec (in the spec's order) at fields[i], zeroed before the call.
struct SampleOut {
  float* image = nullptr;
  std::vector<void*> fields;
  template <class T>
  T* field(size_t i) const {
    return static_cast<T*>(fields[i]);
  }
};

// Parses one serialized record into `out`. `source` is "file: record N" for error messages.
// Throws DataError on bad records.
using ParseFn = std::function<void(const std::string& record, const std::string& source, std::mt19937_64& rng,
                                   const SampleOut& out)>;

struct PipelineOptions {
  std::string file_pattern;
  bool training = true;  // shuffles files and records, drops the last partial batch of an epoch
  int64_t batch_size = 32;
  uint64_t seed = 0;
  int worker_index = 0;
  int num_workers = 1;
  int cycle_length = 10;
  int num_threads = 0;  // parse threads; 0 = all cores
  // Parse threads run at this much lower priority, so that on a machine with few cores
  // they fill the gaps of the training threads instead of preempting them; prefetching
  // keeps them ahead, and when they fall behind the training threads wait and free the CPU.
  int thread_nice = 5;
  int64_t shuffle_buffer = 10000;
  // Training file order per epoch: a tf.data-style buffered shuffle of the file list with
  // this buffer; 0 (or at least the number of files) shuffles the whole list.
  int64_t file_shuffle_buffer = 0;
  int prefetch_batches = 3;
  bool cache = false;  // keep raw records in memory after the first pass
  // Keep only every n-th record of the read order (TF OD API's sample_1_of_n_examples).
  int64_t sample_1_of_n = 1;
  int64_t num_epochs = -1;  // -1: repeat forever
  // Reads of the data set per epoch: more than 1 when one batch holds more records than the data
  // set (the OD API repeats its input before batching); batches and positions span the passes.
  int64_t passes_per_epoch = 1;
  int64_t start_epoch = 0;  // resume position: first epoch and batch within it
  int64_t start_batch = 0;
  TFRecordReaderOptions reader;
  bool pin_memory = false;
};

struct Batch {
  at::Tensor images;                         // float32 [B, *image_shape]
  std::map<std::string, at::Tensor> fields;  // the spec's fields by name, [B, *shape]
  std::vector<std::string> sources;          // "file: record N" of each sample (empty for synthetic data)
  int64_t size = 0;
  int64_t epoch = 0;
  int64_t index_in_epoch = 0;  // this batch's index within its epoch

  // A field by name; an error naming it (and what the batch has) when absent.
  const at::Tensor& field(const std::string& name) const;
  at::Tensor& field(const std::string& name);
  // Keeps the first n samples.
  void truncate(int64_t n);
  // Keeps the samples at `rows` (ascending), in that order.
  void keep_rows(const std::vector<int64_t>& rows);
  // Moves every tensor to `device` (non-blocking from pinned memory).
  void to(const c10::Device& device);
};

class Pipeline {
 public:
  Pipeline(PipelineOptions options, SampleSpec spec, ParseFn parse);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Next batch; false when num_epochs are exhausted. Rethrows the first data error.
  bool next(Batch* batch);

  const std::vector<std::string>& files() const;
  // With skip_corrupt_records: the records skipped so far, each once however many epochs met it,
  // as "file: record N ...: why". Records with bad CRCs or framing, and samples whose parse
  // failed with a DataError (an undecodable or oversized image, a malformed Example): those
  // leave their batch one sample smaller.
  int64_t skipped_records() const;
  std::vector<std::string> skipped() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Counts the records in files (for steps-per-epoch), honouring the worker shard.
int64_t count_records(const std::vector<std::string>& files, const TFRecordReaderOptions& options);

// tf.data's Dataset.shuffle(buffer) over a list: fill a buffer, repeatedly emit a random
// element of it and refill from the input. buffer <= 1 keeps the order.
std::vector<std::string> buffered_shuffle(const std::vector<std::string>& items, int64_t buffer, std::mt19937_64& rng);

// A deterministic 64-bit mix of several values (splitmix64), for deriving RNG seeds.
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace orchard::data
