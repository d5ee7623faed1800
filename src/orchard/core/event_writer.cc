#include "orchard/core/event_writer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/tfrecord.h"
#include "orchard/proto/event.pb.h"

namespace orchard {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

EventWriter::EventWriter(const std::string& dir, double upload_interval_s) : upload_interval_s_(upload_interval_s) {
  ensure_writable_dir(dir);
  static std::atomic<int> counter{0};
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = join_path(dir, "events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." + host +
                             "." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  upload_ = !is_local_path(path_);
  if (upload_) {
    local_ = make_temporary_file("events");
    file_ = std::fopen(local_.c_str(), "wb");
  } else {
    path_ = local_path(path_);
    local_ = path_;
    file_ = std::fopen(local_.c_str(), "wb");
  }
  if (!file_) throw Error(path_ + ": cannot create event file: " + std::strerror(errno));
  tensorflow::Event ev;
  ev.set_wall_time(now_seconds());
  ev.set_file_version("brain.Event:2");
  write_event(ev.SerializeAsString());
  flush();
}

EventWriter::~EventWriter() {
  if (!file_) return;
  std::fclose(file_);
  file_ = nullptr;
  if (upload_) {
    try {
      upload_locked();
    } catch (const std::exception& e) {
      spdlog::warn("{}: the last events were not uploaded: {}", path_, e.what());
    }
    std::remove(local_.c_str());
  }
}

// The whole local file as the object (written whole or not at all: a reader sees the last
// complete upload).
void EventWriter::upload_locked() {
  if (file_) std::fflush(file_);
  fs::write_file(path_, read_file(local_));
  last_upload_ = now_seconds();
}

void EventWriter::write_event(const std::string& serialized) {
  const std::string framed = frame_record(serialized);
  std::lock_guard<std::mutex> lock(mu_);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size())
    throw Error(path_ + ": write failed: " + std::strerror(errno));
}

void EventWriter::scalar(const std::string& tag, double value, int64_t step) {
  tensorflow::Event ev;
  ev.set_wall_time(now_seconds());
  ev.set_step(step);
  auto* v = ev.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_event(ev.SerializeAsString());
}

void EventWriter::image(const std::string& tag, const std::string& png, int height, int width, int64_t step) {
  tensorflow::Event ev;
  ev.set_wall_time(now_seconds());
  ev.set_step(step);
  auto* v = ev.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* im = v->mutable_image();
  im->set_height(height);
  im->set_width(width);
  im->set_colorspace(3);  // RGB
  im->set_encoded_image_string(png);
  write_event(ev.SerializeAsString());
}

void EventWriter::session_start(int64_t step) {
  tensorflow::Event ev;
  ev.set_wall_time(now_seconds());
  ev.set_step(step);
  ev.mutable_session_log()->set_status(tensorflow::SessionLog::START);
  write_event(ev.SerializeAsString());
}

void EventWriter::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fflush(file_);
  if (upload_ && now_seconds() - last_upload_ >= upload_interval_s_) upload_locked();
}

std::vector<ScalarEvent> read_scalar_events(const std::string& path, std::string* file_version) {
  TFRecordReader reader(path);
  std::vector<ScalarEvent> out;
  std::string rec;
  while (reader.next(&rec)) {
    tensorflow::Event ev;
    if (!ev.ParseFromString(rec)) throw DataError(path + ": record is not a tensorflow.Event");
    if (ev.has_file_version() && file_version) *file_version = ev.file_version();
    if (!ev.has_summary()) continue;
    for (const auto& v : ev.summary().value())
      if (v.value_case() == tensorflow::Summary::Value::kSimpleValue)
        out.push_back({v.tag(), ev.step(), v.simple_value()});
  }
  return out;
}

}  // namespace orchard
