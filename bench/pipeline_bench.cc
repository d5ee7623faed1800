// Input-pipeline throughput: read TFRecords + parse tf.train.Example + JPEG decode-and-crop
// + ResNet train preprocessing (distorted crop, flip, bilinear resize to 224, mean
// subtraction) + batching, through orchard::data::Pipeline exactly as `orchard classify
// train` uses it. Prints one JSON line:
//   {"impl":"orchard","threads":T,"images":N,"seconds":..,"images_per_s":..,
//    "images_per_s_per_thread":..,"cpu_seconds":..,"images_per_cpu_s":..,...}
// images_per_cpu_s (images per second of process CPU time) is the per-core figure that is
// least disturbed by other load on a shared machine.
//
// --direct skips the Pipeline and runs the parser on records held in memory in the
// calling thread (one core, no reading, no threading): the per-image cost of decode +
// preprocess alone, and the program to run under callgrind/perf.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/imagenet.h"
#include "orchard/data/pipeline.h"

namespace {

using orchard::bench::cpu_now;
using orchard::bench::wall_now;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Orchard input-pipeline benchmark (TFRecord -> JPEG decode -> ResNet train preprocessing -> batch)"};
  std::string pattern;
  int threads = 1;
  int64_t batch_size = 32, batches = 40, warmup = 4, shuffle_buffer = 10000, num_classes = 1000;
  int image_size = 224, cycle_length = 10, prefetch = 3;
  uint64_t seed = 0;
  bool channels_last = false, direct = false, cache = false, full_checksum = false;
  app.add_option("--pattern", pattern, "TFRecord file pattern, e.g. /tmp/records/train-*")->required();
  app.add_option("--threads", threads, "Parse threads (PipelineOptions::num_threads)")->capture_default_str();
  app.add_option("--batch_size", batch_size)->capture_default_str();
  app.add_option("--batches", batches, "Timed batches")->capture_default_str();
  app.add_option("--warmup_batches", warmup, "Untimed batches first")->capture_default_str();
  app.add_option("--image_size", image_size)->capture_default_str();
  app.add_option("--shuffle_buffer", shuffle_buffer)->capture_default_str();
  app.add_option("--cycle_length", cycle_length)->capture_default_str();
  app.add_option("--prefetch_batches", prefetch)->capture_default_str();
  app.add_option("--num_classes", num_classes)->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  app.add_flag("--channels_last", channels_last, "NHWC output instead of NCHW");
  app.add_flag("--cache", cache, "Keep raw records in memory after the first pass");
  app.add_flag("--direct", direct, "No Pipeline: parse in-memory records in this thread");
  app.add_flag("--full_checksum", full_checksum,
               "Sum every pixel of every batch (slower; to check that two builds give the same batches)");
  CLI11_PARSE(app, argc, argv);

  try {
    at::set_num_threads(1);  // nothing here should use intra-op threads
    orchard::data::ImageNetParseOptions po;
    po.training = true;
    po.num_classes = num_classes;
    po.preprocess.image_size = image_size;
    po.preprocess.channels_last = channels_last;
    const auto parse = orchard::data::make_imagenet_parser(po);
    const auto spec = orchard::data::imagenet_spec(image_size, channels_last);
    const int64_t numel = 3LL * image_size * image_size;

    nlohmann::json out;
    out["impl"] = direct ? "orchard-direct" : "orchard";
    out["batch_size"] = batch_size;
    out["image_size"] = image_size;
    double checksum = 0;

    if (direct) {
      // All records in memory, parsed one after another in this thread.
      std::vector<std::string> records;
      std::string rec;
      for (const auto& f : orchard::expand_file_pattern(pattern)) {
        orchard::TFRecordReader r(f);
        while (r.next(&rec)) records.push_back(rec);
      }
      if (records.empty()) throw orchard::Error(pattern + ": no records");
      std::vector<float> image(static_cast<size_t>(numel));
      int64_t label = 0;
      orchard::data::SampleOut sample;
      sample.image = image.data();
      sample.fields = {&label};
      auto run = [&](int64_t n, int64_t first) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = first + i;
          std::mt19937_64 rng(orchard::data::mix_seed(seed, 0, static_cast<uint64_t>(k)));
          parse(records[static_cast<size_t>(k) % records.size()], "record", rng, sample);
          checksum += image[static_cast<size_t>(k) % image.size()];
        }
      };
      run(warmup * batch_size, 0);
      const double w0 = wall_now(), c0 = cpu_now();
      run(batches * batch_size, warmup * batch_size);
      const double secs = wall_now() - w0, cpu = cpu_now() - c0;
      const int64_t n = batches * batch_size;
      out["threads"] = 1;
      out["images"] = n;
      out["seconds"] = secs;
      out["images_per_s"] = n / secs;
      out["images_per_s_per_thread"] = n / secs;
      out["cpu_seconds"] = cpu;
      out["images_per_cpu_s"] = n / cpu;
    } else {
      orchard::data::PipelineOptions opt;
      opt.file_pattern = pattern;
      opt.training = true;
      opt.batch_size = batch_size;
      opt.seed = seed;
      opt.num_threads = threads;
      opt.cycle_length = cycle_length;
      opt.shuffle_buffer = shuffle_buffer;
      opt.prefetch_batches = prefetch;
      opt.cache = cache;
      opt.num_epochs = -1;
      orchard::data::Pipeline pipeline(opt, spec, parse);
      orchard::data::Batch batch;
      auto consume = [&](int64_t n) {
        int64_t images = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (!pipeline.next(&batch)) throw orchard::Error("pipeline ended early");
          images += batch.size;
          // Touch the batch so that nothing is optimised away.
          if (full_checksum)
            checksum += batch.images.sum(at::kDouble).item<double>() + batch.field("label").sum().item<int64_t>();
          else
            checksum += static_cast<double>(batch.images.data_ptr<float>()[i % numel]) +
                        batch.field("label")[0].item<int64_t>();
        }
        return images;
      };
      const double start = wall_now();
      consume(warmup);
      const double w0 = wall_now(), c0 = cpu_now();
      const int64_t n = consume(batches);
      const double secs = wall_now() - w0, cpu = cpu_now() - c0;
      out["threads"] = threads;
      out["images"] = n;
      out["seconds"] = secs;
      out["images_per_s"] = n / secs;
      out["images_per_s_per_thread"] = n / secs / threads;
      out["cpu_seconds"] = cpu;
      out["images_per_cpu_s"] = n / cpu;
      out["startup_seconds"] = w0 - start;
      out["files"] = pipeline.files().size();
    }
    out["checksum"] = checksum;
    std::cout << out.dump() << std::endl;
  } catch (const orchard::Error& e) {
    std::fprintf(stderr, "pipeline_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
