// TensorFlow checkpoints, read and written without TensorFlow (facts: docs/formats.md).
//
// V2 (tf.train.Saver since TF 1.2, tf.train.Checkpoint): a prefix P names `P.index` (a table,
// tf_table.h: key "" = BundleHeaderProto, every other key a variable's name ->
// BundleEntryProto: dtype, shape, shard, offset, size, masked CRC-32C) and the shards
// `P.data-00000-of-0000N` (each tensor's bytes, little-endian, row-major; strings as varint64
// lengths, a masked CRC-32C of the lengths, the bytes).
// V1 (TF-Slim's classification checkpoints, e.g. inception_v3.ckpt): one table file whose
// values are SavedTensorSlices: key "" lists the tensors, the others hold a slice of one as a
// TensorProto.
//
// A checkpoint is named as TensorFlow names it: a prefix (`model.ckpt`, `model.ckpt-150000`),
// one of its files (`.index`, `.data-...`, `.meta`), a V1 file, or a directory (its `checkpoint`
// file's model_checkpoint_path; a SavedModel's variables/variables; else its only `*.index`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace orchard::tf {

// tensorflow.DataType numbers of the types checkpoints hold.
enum DataType : int {
  kFloat = 1,
  kDouble = 2,
  kInt32 = 3,
  kUInt8 = 4,
  kInt16 = 5,
  kInt8 = 6,
  kString = 7,
  kInt64 = 9,
  kBool = 10,
  kBFloat16 = 14,
  kUInt16 = 17,
  kHalf = 19,
  kUInt32 = 22,
  kUInt64 = 23,
};
// "float32", "bfloat16", "string", ...; "DT_<n>" for others.
std::string dtype_name(int dtype);
// Bytes per element; 0 for strings and types a checkpoint reader here does not know.
size_t dtype_size(int dtype);

struct VariableInfo {
  std::string name;
  int dtype = 0;
  std::vector<int64_t> shape;
};
std::string shape_string(const std::vector<int64_t>& shape);  // "[3, 3, 32, 64]"

struct Tensor {
  int dtype = 0;
  std::vector<int64_t> shape;
  std::string data;                  // fixed-size dtypes: little-endian, row-major
  std::vector<std::string> strings;  // kString
  int64_t num_elements() const;
  // The values as float (float, double, half, bfloat16, integers, bool); throws for strings.
  std::vector<float> floats() const;
};

// A variable of a tf.train.Checkpoint (TF2) checkpoint, from its object graph.
struct TrackedVariable {
  std::string key;        // "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"
  std::string path;       // "model/layer_with_weights-0/kernel": the objects from the root
  std::string full_name;  // the variable's name when created, e.g. "conv1/kernel" ("" if not saved)
};

class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  // What was opened: a V2 prefix, or a V1 file.
  const std::string& prefix() const;
  int version() const;  // 1 or 2
  // Every variable, sorted by name (V2 partition slices are not listed on their own).
  const std::vector<VariableInfo>& variables() const;
  const VariableInfo* find(const std::string& name) const;
  // A variable's value (a partitioned V2 variable assembled from its slices); the CRC-32C of
  // V2 data is checked. Throws DataError naming the file
  // and the variable.
  Tensor read(const std::string& name) const;
  // tf.train.Checkpoint's object graph (empty for name-based checkpoints).
  std::vector<TrackedVariable> tracked_variables() const;
  // V2: the data files the index names that are not there (a download or copy of the index
  // alone, or one still in progress): the variables are listed, their values cannot be read.
  // V1: none (one file holds both).
  std::vector<std::string> missing_data_files() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What `path` names: a V2 prefix or a V1 file. Throws Error saying what was looked for.
std::string resolve_checkpoint(const std::string& path);
// True if `path` names a TensorFlow checkpoint (a V2 prefix or one of its files, a directory
// whose checkpoint is one, or a file ending in the table magic); false for anything else,
// e.g. an Orchard checkpoint or model_dir.
bool is_tensorflow_checkpoint(const std::string& path);

// The key of one slice of a variable, as TensorFlow's EncodeTensorNameSlice writes it in V1
// files and for V2's partitioned variables: OrderedCode's number 0, the name, the rank, then
// each dimension's start and length (-1: the whole dimension) as signed numbers. Every such key
// starts with a zero byte, before any variable's name.
std::string tensor_slice_key(const std::string& name, const std::vector<int64_t>& start,
                             const std::vector<int64_t>& length);

// Writes a V2 checkpoint (one shard) as TensorFlow's BundleWriter does; variables sorted by
// name. finish() writes `P.data-00000-of-00001`, then `P.index` (each atomically).
class BundleWriter {
 public:
  explicit BundleWriter(std::string prefix);
  void add(const std::string& name, int dtype, const std::vector<int64_t>& shape, std::string data);
  void add_string(const std::string& name, const std::string& value);  // a scalar string
  // One slice of a partitioned variable (BundleWriter::AddSlice): `data` holds the values of
  // the block at `start` with `length` (-1: the whole dimension). The variable's entry lists
  // its slices; each slice is an entry of its own under tensor_slice_key.
  void add_slice(const std::string& name, int dtype, const std::vector<int64_t>& full_shape,
                 const std::vector<int64_t>& start, const std::vector<int64_t>& length, std::string data);
  void finish();

 private:
  struct Item {
    int dtype = 0;
    std::vector<int64_t> shape;
    std::string bytes;
    uint32_t crc = 0;
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> slices;  // (start, length)
  };
  std::string prefix_;
  std::map<std::string, Item> items_;
};

}  // namespace orchard::tf
