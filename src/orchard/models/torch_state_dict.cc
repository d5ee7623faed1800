#include "orchard/models/torch_state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <memory>

#include "orchard/core/error.h"
#include "orchard/core/files.h"

namespace orchard::models {
namespace {

// A Python object of the subset torch.save pickles.
struct PyObj;
using Obj = std::shared_ptr<PyObj>;
struct PyObj {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kGlobal, kTuple, kList, kDict, kTensor };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;                          // a string, or "module.name" of a global
  std::vector<Obj> items;                 // tuple, list
  std::vector<std::pair<Obj, Obj>> dict;  // dict (insertion order)
  torch::Tensor tensor;                   // a storage (1-d) or a tensor
};

Obj make(PyObj::Kind kind) {
  auto o = std::make_shared<PyObj>();
  o->kind = kind;
  return o;
}

torch::ScalarType storage_dtype(const std::string& global, const std::string& file) {
  static const std::map<std::string, torch::ScalarType> types = {
      {"torch.FloatStorage", torch::kFloat}, {"torch.DoubleStorage", torch::kDouble},
      {"torch.HalfStorage", torch::kHalf},   {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kLong},   {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort}, {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},   {"torch.BoolStorage", torch::kBool}};
  auto it = types.find(global);
  if (it == types.end()) throw Error(file + ": unsupported storage type " + global);
  return it->second;
}

class Unpickler {
 public:
  Unpickler(caffe2::serialize::PyTorchStreamReader& archive, std::string file)
      : archive_(archive), file_(std::move(file)) {
    auto [data, size] = archive_.getRecord("data.pkl");
    const char* p = static_cast<const char*>(data.get());
    bytes_.assign(p, p + size);
  }

  Obj load() {
    while (true) {
      const uint8_t op = u8();
      switch (op) {
        case 0x80: u8(); break;     // PROTO
        case 0x95: take(8); break;  // FRAME
        case '.': return pop();     // STOP
        case '(': marks_.push_back(stack_.size()); break;
        case 'N': stack_.push_back(make(PyObj::Kind::kNone)); break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          auto o = make(PyObj::Kind::kBool);
          o->i = op == 0x88;
          stack_.push_back(o);
          break;
        }
        case 'K': push_int(u8()); break;                         // BININT1
        case 'M': push_int(static_cast<int64_t>(le(2))); break;  // BININT2
        case 'J': push_int(static_cast<int32_t>(le(4))); break;  // BININT
        case 0x8a: {                                             // LONG1
          const int n = u8();
          if (n > 8) throw bad("a LONG1 wider than 8 bytes");
          uint64_t v = le(n);
          if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
          push_int(static_cast<int64_t>(v));
          break;
        }
        case 'G': {  // BINFLOAT (big-endian)
          uint64_t v = 0;
          for (int k = 0; k < 8; ++k) v = (v << 8) | u8();
          auto o = make(PyObj::Kind::kFloat);
          std::memcpy(&o->f, &v, 8);
          stack_.push_back(o);
          break;
        }
        case 'X': push_string(le(4)); break;  // BINUNICODE
        case 0x8c:
        case 'U': push_string(u8()); break;    // SHORT_BINUNICODE, SHORT_BINSTRING
        case 0x8d: push_string(le(8)); break;  // BINUNICODE8
        case 'c': {                            // GLOBAL "module\nname\n"
          const std::string module = line(), name = line();
          push_global(module + "." + name);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const Obj name = pop(), module = pop();
          push_global(module->s + "." + name->s);
          break;
        }
        case 'q': memo(u8()); break;                                   // BINPUT
        case 'r': memo(le(4)); break;                                  // LONG_BINPUT
        case 0x94: memo(memo_.size()); break;                          // MEMOIZE
        case 'h': stack_.push_back(memo_at(u8())); break;              // BINGET
        case 'j': stack_.push_back(memo_at(le(4))); break;             // LONG_BINGET
        case ')': stack_.push_back(make(PyObj::Kind::kTuple)); break;  // EMPTY_TUPLE
        case 't': stack_.push_back(collect(PyObj::Kind::kTuple)); break;
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          auto o = make(PyObj::Kind::kTuple);
          const size_t n = op - 0x84u;
          if (stack_.size() < n) throw bad("a truncated tuple");
          o->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.push_back(o);
          break;
        }
        case ']': stack_.push_back(make(PyObj::Kind::kList)); break;  // EMPTY_LIST
        case 'l': stack_.push_back(collect(PyObj::Kind::kList)); break;
        case 'a': {
          Obj v = pop();
          top(PyObj::Kind::kList)->items.push_back(v);
          break;
        }            // APPEND
        case 'e': {  // APPENDS
          auto items = pop_to_mark();
          auto& list = top(PyObj::Kind::kList)->items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case '}': stack_.push_back(make(PyObj::Kind::kDict)); break;  // EMPTY_DICT
        case 's': {                                                   // SETITEM
          Obj v = pop(), k = pop();
          top(PyObj::Kind::kDict)->dict.emplace_back(k, v);
          break;
        }
        case 'u': {  // SETITEMS
          auto items = pop_to_mark();
          if (items.size() % 2) throw bad("SETITEMS with an odd number of items");
          auto& d = top(PyObj::Kind::kDict)->dict;
          for (size_t k = 0; k < items.size(); k += 2) d.emplace_back(items[k], items[k + 1]);
          break;
        }
        case 'R': {  // REDUCE
          Obj args = pop(), callable = pop();
          stack_.push_back(reduce(callable, args));
          break;
        }
        case 'b': {  // BUILD: only OrderedDict's state (the state_dict's _metadata), dropped
          pop();
          top(PyObj::Kind::kDict);
          break;
        }
        case 'Q': stack_.push_back(persistent_load(pop())); break;  // BINPERSID
        default: throw bad("unsupported pickle opcode 0x" + hex(op));
      }
    }
  }

 private:
  Error bad(const std::string& what) const {
    return Error(file_ + ": not a state dict torch.save can write (" + what + " at byte " + std::to_string(pos_) + ")");
  }
  static std::string hex(uint8_t v) {
    const char* d = "0123456789abcdef";
    return {d[v >> 4], d[v & 15]};
  }
  uint8_t u8() {
    if (pos_ >= bytes_.size()) throw bad("the pickle ends early");
    return static_cast<uint8_t>(bytes_[pos_++]);
  }
  std::string take(uint64_t n) {
    if (n > bytes_.size() - pos_) throw bad("the pickle ends early");
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t le(int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v |= static_cast<uint64_t>(u8()) << (8 * k);
    return v;
  }
  std::string line() {
    const size_t end = bytes_.find('\n', pos_);
    if (end == std::string::npos) throw bad("an unterminated GLOBAL");
    std::string s = bytes_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  void push_int(int64_t v) {
    auto o = make(PyObj::Kind::kInt);
    o->i = v;
    stack_.push_back(o);
  }
  void push_string(uint64_t n) {
    auto o = make(PyObj::Kind::kString);
    o->s = take(n);
    stack_.push_back(o);
  }
  void push_global(const std::string& name) {
    auto o = make(PyObj::Kind::kGlobal);
    o->s = name;
    stack_.push_back(o);
  }
  Obj pop() {
    if (stack_.empty()) throw bad("an empty stack");
    Obj o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Obj top(PyObj::Kind kind) {
    if (stack_.empty() || stack_.back()->kind != kind) throw bad("an unexpected object");
    return stack_.back();
  }
  std::vector<Obj> pop_to_mark() {
    if (marks_.empty()) throw bad("no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Obj> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Obj collect(PyObj::Kind kind) {
    auto o = make(kind);
    o->items = pop_to_mark();
    return o;
  }
  void memo(uint64_t id) {
    if (stack_.empty()) throw bad("a memo of nothing");
    if (memo_.size() <= id) memo_.resize(id + 1);
    memo_[id] = stack_.back();
  }
  Obj memo_at(uint64_t id) const {
    if (id >= memo_.size() || !memo_[id]) throw bad("an unknown memo id");
    return memo_[id];
  }
  static int64_t as_int(const Obj& o) { return o->i; }
  std::vector<int64_t> ints(const Obj& tuple) const {
    if (tuple->kind != PyObj::Kind::kTuple) throw bad("a size or stride that is not a tuple");
    std::vector<int64_t> v;
    for (const auto& x : tuple->items) v.push_back(as_int(x));
    return v;
  }

  Obj reduce(const Obj& callable, const Obj& args) {
    if (callable->kind != PyObj::Kind::kGlobal || args->kind != PyObj::Kind::kTuple)
      throw bad("a REDUCE of something other than a known function");
    const std::string& f = callable->s;
    const auto& a = args->items;
    if (f == "collections.OrderedDict") return make(PyObj::Kind::kDict);
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      // (storage, storage_offset, size, stride, [requires_grad, backward_hooks, [metadata]])
      if (a.size() < 4 || a[0]->kind != PyObj::Kind::kTensor) throw bad("a malformed tensor");
      auto o = make(PyObj::Kind::kTensor);
      o->tensor = a[0]->tensor.as_strided(ints(a[2]), ints(a[3]), as_int(a[1]));
      return o;
    }
    if (f == "torch._utils._rebuild_parameter") {  // (data, requires_grad, backward_hooks)
      if (a.empty() || a[0]->kind != PyObj::Kind::kTensor) throw bad("a malformed parameter");
      return a[0];
    }
    throw bad("a call of " + f);
  }

  // ('storage', torch.FloatStorage, key, location, numel): the record data/<key>.
  Obj persistent_load(const Obj& pid) {
    if (pid->kind != PyObj::Kind::kTuple || pid->items.size() < 5 || pid->items[0]->s != "storage")
      throw bad("a persistent id that is not a storage");
    const std::string key = pid->items[2]->s;
    auto it = storages_.find(key);
    if (it != storages_.end()) return it->second;
    const torch::ScalarType dtype = storage_dtype(pid->items[1]->s, file_);
    const std::string record = "data/" + key;
    if (!archive_.hasRecord(record)) throw Error(file_ + ": the storage record " + record + " is missing");
    auto [data, size] = archive_.getRecord(record);
    const int64_t numel = static_cast<int64_t>(size) / static_cast<int64_t>(c10::elementSize(dtype));
    auto o = make(PyObj::Kind::kTensor);
    o->tensor = torch::from_blob(data.get(), {numel}, torch::TensorOptions().dtype(dtype)).clone();
    storages_[key] = o;
    return o;
  }

  caffe2::serialize::PyTorchStreamReader& archive_;
  std::string file_;
  std::string bytes_;
  size_t pos_ = 0;
  std::vector<Obj> stack_;
  std::vector<size_t> marks_;
  std::vector<Obj> memo_;
  std::map<std::string, Obj> storages_;
};

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> read_torch_state_dict(const std::string& path) {
  const LocalCopy local(path);  // the zip archive is read by seeking: an object is downloaded first
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(local.path());
  } catch (const c10::Error& e) {
    throw Error(path + ": not a torch.save zip archive (save with torch.save, torch >= 1.6): " +
                std::string(e.what_without_backtrace()));
  }
  Obj root = Unpickler(*archive, path).load();
  // A training checkpoint that wraps the weights: {"state_dict": {...}} or {"model": {...}}.
  for (int depth = 0; depth < 2 && root->kind == PyObj::Kind::kDict; ++depth) {
    Obj inner;
    for (const auto& [k, v] : root->dict)
      if ((k->s == "state_dict" || k->s == "model") && v->kind == PyObj::Kind::kDict) inner = v;
    if (!inner) break;
    root = inner;
  }
  if (root->kind != PyObj::Kind::kDict) throw Error(path + ": the saved object is not a dict of tensors");
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [k, v] : root->dict) {
    if (k->kind != PyObj::Kind::kString) throw Error(path + ": a state dict key that is not a string");
    if (v->kind != PyObj::Kind::kTensor) throw Error(path + ": '" + k->s + "' is not a tensor");
    out.emplace_back(k->s, v->tensor);
  }
  return out;
}

}  // namespace orchard::models
