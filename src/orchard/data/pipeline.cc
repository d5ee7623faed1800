#include "orchard/data/pipeline.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "orchard/core/cpu_quota.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/thread_pool.h"

namespace orchard::data {

std::vector<std::string> buffered_shuffle(const std::vector<std::string>& items, int64_t buffer, std::mt19937_64& rng) {
  if (buffer <= 1) return items;
  std::vector<std::string> out, pool;
  out.reserve(items.size());
  size_t next = 0;
  while (next < items.size() || !pool.empty()) {
    while (next < items.size() && static_cast<int64_t>(pool.size()) < buffer) pool.push_back(items[next++]);
    const size_t pick = std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng);
    out.push_back(std::move(pool[pick]));
    pool[pick] = std::move(pool.back());
    pool.pop_back();
  }
  return out;
}

const at::Tensor& Batch::field(const std::string& name) const {
  auto it = fields.find(name);
  if (it != fields.end()) return it->second;
  std::string have;
  for (const auto& [k, v] : fields) have += (have.empty() ? "" : ", ") + k;
  throw Error("the batch has no field '" + name + "' (it has: " + (have.empty() ? "none" : have) + ")");
}

at::Tensor& Batch::field(const std::string& name) {
  return const_cast<at::Tensor&>(static_cast<const Batch&>(*this).field(name));
}

void Batch::truncate(int64_t n) {
  images = images.narrow(0, 0, n);
  for (auto& [name, t] : fields) t = t.narrow(0, 0, n);
  if (static_cast<int64_t>(sources.size()) > n) sources.resize(static_cast<size_t>(n));
  size = n;
}

void Batch::keep_rows(const std::vector<int64_t>& rows) {
  const at::Tensor index = at::tensor(rows, at::kLong);
  images = images.index_select(0, index);
  for (auto& [name, t] : fields) t = t.index_select(0, index);
  if (!sources.empty()) {
    std::vector<std::string> kept;
    for (const int64_t r : rows) kept.push_back(sources[static_cast<size_t>(r)]);
    sources = std::move(kept);
  }
  size = static_cast<int64_t>(rows.size());
}

void Batch::to(const c10::Device& device) {
  images = images.to(device, /*non_blocking=*/true);
  for (auto& [name, t] : fields) t = t.to(device, /*non_blocking=*/true);
}

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  auto sm = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  return sm(sm(sm(a) ^ b) ^ c);
}

int64_t count_records(const std::vector<std::string>& files, const TFRecordReaderOptions& options) {
  int64_t n = 0;
  std::string rec;
  for (const auto& f : files) {
    TFRecordReader r(f, options);
    while (r.next(&rec)) ++n;
  }
  return n;
}

namespace {

struct Record {
  std::string bytes;
  std::string source;
};

// One batch being filled by parse tasks.
struct BatchJob {
  Batch batch;
  std::vector<Record> records;
  std::vector<uint64_t> seeds;
  std::atomic<int> remaining{0};
  std::mutex mu;
  std::condition_variable done;
  std::exception_ptr error;
  std::vector<std::pair<int64_t, std::string>> bad;  // skipped samples: row, why (skip_corrupt_records)
  bool end = false;                                  // sentinel: no more batches
};

}  // namespace

struct Pipeline::Impl {
  PipelineOptions opt;
  SampleSpec spec;
  ParseFn parse;
  std::vector<std::string> files;
  std::unique_ptr<ThreadPool> pool;
  std::thread producer;
  std::mutex mu;
  std::condition_variable cv_push, cv_pop;
  std::deque<std::shared_ptr<BatchJob>> queue;
  // Set (under mu, so that push's wait sees it) on destruction; the readers poll it without
  // the lock between records.
  std::atomic<bool> stop{false};
  // Set on the first error that ends the pipeline and on destruction: parse work still queued
  // then returns at once instead of decoding images nobody will see.
  std::atomic<bool> cancelled{false};
  mutable std::mutex skipped_mu;
  std::set<std::string> skipped;  // distinct: an epoch meeting a bad record again adds nothing
  std::map<std::string, std::vector<std::string>> cache;
  int64_t image_numel = 1;
  // Image tensors of earlier batches, reused once nobody else holds them (tensor or view):
  // a fresh batch-sized allocation is returned to the OS on free and page-faults again on
  // first touch, which cost ~30% of the parse threads' time (bench/pipeline_bench).
  // Steady state needs prefetch_batches + 3 (queued, the one next() waits for, the one the
  // caller holds, the one being allocated); +4 leaves one for a caller holding two.
  // Producer thread only.
  std::vector<at::Tensor> recycled;

  at::Tensor image_tensor(const std::vector<int64_t>& shape, const at::TensorOptions& fopts) {
    // Pinned memory is left to the CUDA host allocator, which also tracks in-flight copies.
    if (opt.pin_memory) return at::empty(shape, fopts);
    for (const auto& t : recycled)
      if (t.use_count() == 1 && t.storage().use_count() == 1 && t.sizes() == at::IntArrayRef(shape)) return t;
    at::Tensor t = at::empty(shape, fopts);
    if (static_cast<int>(recycled.size()) < std::max(1, opt.prefetch_batches) + 4) recycled.push_back(t);
    return t;
  }

  bool push(std::shared_ptr<BatchJob> job) {
    std::unique_lock<std::mutex> lock(mu);
    cv_push.wait(lock, [&] { return stop || static_cast<int>(queue.size()) < std::max(1, opt.prefetch_batches); });
    if (stop) return false;
    queue.push_back(std::move(job));
    cv_pop.notify_one();
    return true;
  }

  void run_parse(const std::shared_ptr<BatchJob>& job, int64_t begin, int64_t end) {
    try {
      float* images = job->batch.images.data_ptr<float>();
      std::vector<char*> bases;
      std::vector<int64_t> strides;  // bytes per sample
      for (const auto& f : spec.fields) {
        const auto& t = job->batch.fields.at(f.name);
        bases.push_back(static_cast<char*>(t.data_ptr()));
        strides.push_back(t.numel() / std::max<int64_t>(1, t.size(0)) * static_cast<int64_t>(t.element_size()));
      }
      SampleOut out;
      out.fields.resize(bases.size());
      for (int64_t i = begin; i < end && !cancelled; ++i) {
        std::mt19937_64 rng(job->seeds[i]);
        out.image = images + i * image_numel;
        for (size_t k = 0; k < bases.size(); ++k) out.fields[k] = bases[k] + i * strides[k];
        try {
          parse(job->records[i].bytes, job->records[i].source, rng, out);
        } catch (const DataError& e) {
          if (!opt.reader.skip_corrupt_records) throw;
          std::lock_guard<std::mutex> lock(job->mu);
          job->bad.emplace_back(i, e.what());
        }
      }
    } catch (...) {
      cancelled = true;
      std::lock_guard<std::mutex> lock(job->mu);
      if (!job->error) job->error = std::current_exception();
    }
    if (job->remaining.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(job->mu);
      job->done.notify_all();
    }
  }

  // Allocates the batch tensors and queues its parse work in a few chunks.
  bool emit(std::vector<Record>&& records, std::vector<uint64_t>&& seeds, int64_t epoch, int64_t index) {
    auto job = std::make_shared<BatchJob>();
    const int64_t n = static_cast<int64_t>(records.size());
    std::vector<int64_t> shape = {n};
    shape.insert(shape.end(), spec.image_shape.begin(), spec.image_shape.end());
    auto fopts = at::TensorOptions().dtype(at::kFloat).pinned_memory(opt.pin_memory);
    job->batch.images = image_tensor(shape, fopts);
    for (const auto& f : spec.fields) {
      std::vector<int64_t> field_shape = {n};
      field_shape.insert(field_shape.end(), f.shape.begin(), f.shape.end());
      job->batch.fields[f.name] =
          at::zeros(field_shape, at::TensorOptions().dtype(f.dtype).pinned_memory(opt.pin_memory));
    }
    job->batch.sources.reserve(static_cast<size_t>(n));
    for (const auto& r : records) job->batch.sources.push_back(r.source);
    job->batch.size = n;
    job->batch.epoch = epoch;
    job->batch.index_in_epoch = index;
    job->records = std::move(records);
    job->seeds = std::move(seeds);
    const int64_t chunks = std::min<int64_t>(n, pool->size() * 2);
    job->remaining = static_cast<int>(chunks);
    if (!push(job)) return false;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
      pool->submit([this, job, b, e] { run_parse(job, b, e); });
    }
    return true;
  }

  void push_error(std::exception_ptr e) {
    auto job = std::make_shared<BatchJob>();
    job->error = e;
    job->end = true;
    push(job);
  }

  // Reads the epoch's files with interleaving, calling sink(record) for each record this
  // worker owns. Returns false if stopped.
  template <typename Sink>
  bool read_epoch(const std::vector<std::string>& epoch_files, bool record_shard, Sink&& sink) {
    struct Source {
      std::string file;
      std::unique_ptr<TFRecordReader> reader;
      const std::vector<std::string>* cached = nullptr;
      std::vector<std::string> fill;  // records read this pass, for the cache
      size_t pos = 0;
      size_t skipped_counted = 0;  // entries of this reader's skipped_log() already in `skipped`
    };
    std::deque<std::string> pending(epoch_files.begin(), epoch_files.end());
    // Object-store shards: the next file's first blocks are fetched before a reader reaches
    // the end of its own (nothing for local files).
    fs::ShardPrefetcher prefetcher;
    std::vector<Source> active;
    int64_t global_index = 0;
    int64_t sample_index = 0;
    auto open_next = [&](Source* s) {
      while (!pending.empty()) {
        s->file = pending.front();
        pending.pop_front();
        s->pos = 0;
        s->skipped_counted = 0;
        s->fill.clear();
        s->reader.reset();
        auto it = cache.find(s->file);
        s->cached = it != cache.end() ? &it->second : nullptr;
        if (!s->cached)
          s->reader = std::make_unique<TFRecordReader>(s->file, opt.reader, &prefetcher,
                                                       pending.empty() ? std::string() : pending.front());
        return true;
      }
      return false;
    };
    for (int i = 0; i < std::max(1, opt.cycle_length); ++i) {
      Source s;
      if (!open_next(&s)) break;
      active.push_back(std::move(s));
    }
    size_t turn = 0;
    std::string rec;
    while (!active.empty()) {
      if (stop) return false;
      turn %= active.size();
      Source& s = active[turn];
      bool got = false;
      int64_t index = 0;
      if (s.cached) {
        if (s.pos < s.cached->size()) {
          rec = (*s.cached)[s.pos];
          index = static_cast<int64_t>(s.pos++);
          got = true;
        }
      } else {
        index = s.reader->records_read();
        got = s.reader->next(&rec);
        if (s.reader->skipped_log().size() != s.skipped_counted) {  // counted as they happen, for live stats
          std::lock_guard<std::mutex> lock(skipped_mu);
          for (; s.skipped_counted < s.reader->skipped_log().size(); ++s.skipped_counted) {
            const std::string& why = s.reader->skipped_log()[s.skipped_counted];
            if (skipped.insert(why).second) spdlog::warn("skipped: {}", why);
          }
        }
        if (got) {
          index = s.reader->records_read() - 1;
          if (opt.cache) s.fill.push_back(rec);
        }
      }
      if (got && opt.sample_1_of_n > 1 && sample_index++ % opt.sample_1_of_n != 0) {
        ++turn;  // not sampled: as if the record were not there
        continue;
      }
      if (got) {
        bool mine = !record_shard || global_index % opt.num_workers == opt.worker_index;
        ++global_index;
        if (mine) sink(Record{rec, s.file + ": record " + std::to_string(index)});
        ++turn;
        continue;
      }
      if (opt.cache && !s.cached) cache[s.file] = std::move(s.fill);
      if (!open_next(&s)) active.erase(active.begin() + static_cast<long>(turn));
    }
    return true;
  }

  void produce() {
    try {
      for (int64_t epoch = opt.start_epoch; opt.num_epochs < 0 || epoch < opt.num_epochs; ++epoch) {
        std::vector<std::string> epoch_files = files;
        if (opt.training) {
          std::mt19937_64 frng(mix_seed(opt.seed, static_cast<uint64_t>(epoch), 0xf11e5));
          if (opt.file_shuffle_buffer > 0 && opt.file_shuffle_buffer < static_cast<int64_t>(epoch_files.size()))
            epoch_files = buffered_shuffle(epoch_files, opt.file_shuffle_buffer, frng);
          else std::shuffle(epoch_files.begin(), epoch_files.end(), frng);
        }
        bool record_shard = true;
        if (opt.num_workers > 1 && static_cast<int>(epoch_files.size()) >= opt.num_workers) {
          std::vector<std::string> mine;
          for (size_t i = 0; i < epoch_files.size(); ++i)
            if (static_cast<int>(i % opt.num_workers) == opt.worker_index) mine.push_back(epoch_files[i]);
          epoch_files = std::move(mine);
          record_shard = false;
        }
        if (opt.num_workers <= 1) record_shard = false;

        const int64_t skip_records = epoch == opt.start_epoch ? opt.start_batch * opt.batch_size : 0;
        int64_t position = 0;  // position of the next record in this epoch's (shuffled) order
        int64_t batch_index = 0;
        std::vector<Record> pending;
        std::vector<uint64_t> seeds;
        std::mt19937_64 srng(mix_seed(opt.seed, static_cast<uint64_t>(epoch), 0x5eed));
        std::vector<Record> buffer;
        bool ok = true;

        auto deliver = [&](Record&& r) {
          const int64_t pos = position++;
          if (pos < skip_records) return;
          if (pending.empty()) batch_index = pos / opt.batch_size;
          pending.push_back(std::move(r));
          // Augmentation seeds follow the record's place in the whole epoch: with records dealt
          // round-robin to workers, worker w's p-th record is the epoch's (p * workers + w)-th,
          // so N workers augment exactly as one process would. Workers reading whole files
          // get their own streams.
          const uint64_t global_pos = record_shard ? static_cast<uint64_t>(pos) * opt.num_workers + opt.worker_index
                                                   : static_cast<uint64_t>(pos);
          const uint64_t base = !record_shard && opt.num_workers > 1
                                    ? mix_seed(opt.seed, static_cast<uint64_t>(opt.worker_index), 0x3011)
                                    : opt.seed;
          seeds.push_back(mix_seed(base, static_cast<uint64_t>(epoch), global_pos));
          if (static_cast<int64_t>(pending.size()) == opt.batch_size) {
            ok = ok && emit(std::move(pending), std::move(seeds), epoch, batch_index);
            pending.clear();
            seeds.clear();
          }
        };
        auto sink = [&](Record&& r) {
          if (!opt.training || opt.shuffle_buffer <= 1) return deliver(std::move(r));
          if (static_cast<int64_t>(buffer.size()) < opt.shuffle_buffer) {
            buffer.push_back(std::move(r));
            return;
          }
          size_t k = std::uniform_int_distribution<size_t>(0, buffer.size() - 1)(srng);
          Record out = std::move(buffer[k]);
          buffer[k] = std::move(r);
          deliver(std::move(out));
        };
        for (int64_t pass = 0; pass < std::max<int64_t>(1, opt.passes_per_epoch); ++pass)
          if (!read_epoch(epoch_files, record_shard, sink)) return;
        while (!buffer.empty()) {
          size_t k = std::uniform_int_distribution<size_t>(0, buffer.size() - 1)(srng);
          std::swap(buffer[k], buffer.back());
          Record out = std::move(buffer.back());
          buffer.pop_back();
          deliver(std::move(out));
        }
        if (!pending.empty() && !opt.training)
          ok = ok && emit(std::move(pending), std::move(seeds), epoch, batch_index);
        if (!ok) return;
        if (position == 0 && opt.num_epochs < 0)
          throw DataError(opt.file_pattern + ": no records for worker " + std::to_string(opt.worker_index));
      }
      auto end = std::make_shared<BatchJob>();
      end->end = true;
      push(end);
    } catch (...) {
      cancelled = true;
      push_error(std::current_exception());
    }
  }
};

Pipeline::Pipeline(PipelineOptions options, SampleSpec spec, ParseFn parse) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.opt = std::move(options);
  m.spec = std::move(spec);
  m.parse = std::move(parse);
  if (m.opt.batch_size < 1) throw Error("batch size must be positive");
  if (m.opt.sample_1_of_n < 1) throw Error("sample_1_of_n must be at least 1");
  if (m.opt.num_workers < 1 || m.opt.worker_index < 0 || m.opt.worker_index >= m.opt.num_workers)
    throw Error("bad worker index " + std::to_string(m.opt.worker_index) + " of " + std::to_string(m.opt.num_workers));
  m.files = expand_file_pattern(m.opt.file_pattern);
  for (auto d : m.spec.image_shape) m.image_numel *= d;
  m.pool =
      std::make_unique<ThreadPool>(m.opt.num_threads > 0 ? m.opt.num_threads : cpu_budget().threads, m.opt.thread_nice);
  m.producer = std::thread([this] { impl_->produce(); });
}

Pipeline::~Pipeline() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cancelled = true;
  impl_->cv_push.notify_all();
  if (impl_->producer.joinable()) impl_->producer.join();
  impl_->pool.reset();  // queued parse tasks return at once (cancelled)
}

bool Pipeline::next(Batch* batch) {
  for (;;) {
    std::shared_ptr<BatchJob> job;
    {
      std::unique_lock<std::mutex> lock(impl_->mu);
      impl_->cv_pop.wait(lock, [&] { return !impl_->queue.empty(); });
      job = impl_->queue.front();
      if (job->end) {
        if (job->error) std::rethrow_exception(job->error);
        return false;  // leave the sentinel in place: later calls also return false
      }
      impl_->queue.pop_front();
    }
    impl_->cv_push.notify_one();
    {
      std::unique_lock<std::mutex> lock(job->mu);
      job->done.wait(lock, [&] { return job->remaining.load() == 0; });
    }
    if (job->error) std::rethrow_exception(job->error);
    *batch = std::move(job->batch);
    if (job->bad.empty()) return true;
    std::sort(job->bad.begin(), job->bad.end());
    std::vector<int64_t> rows;
    size_t b = 0;
    for (int64_t i = 0; i < batch->size; ++i) {
      if (b < job->bad.size() && job->bad[b].first == i) {
        std::lock_guard<std::mutex> lock(impl_->skipped_mu);
        if (impl_->skipped.insert(job->bad[b].second).second) spdlog::warn("skipped: {}", job->bad[b].second);
        ++b;
      } else {
        rows.push_back(i);
      }
    }
    if (!rows.empty()) {
      batch->keep_rows(rows);
      return true;
    }
  }
}

const std::vector<std::string>& Pipeline::files() const { return impl_->files; }
int64_t Pipeline::skipped_records() const {
  std::lock_guard<std::mutex> lock(impl_->skipped_mu);
  return static_cast<int64_t>(impl_->skipped.size());
}

std::vector<std::string> Pipeline::skipped() const {
  std::lock_guard<std::mutex> lock(impl_->skipped_mu);
  return {impl_->skipped.begin(), impl_->skipped.end()};
}

}  // namespace orchard::data
