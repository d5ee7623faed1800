// TensorBoard event files: TFRecord-framed tensorflow.Event protos, the first one carrying
// file_version "brain.Event:2". Named events.out.tfevents.<secs>.<host>.<pid>.<n> like
// PyTorch's SummaryWriter, so several writers can share a directory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace orchard {

class EventWriter {
 public:
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step);
  // An image summary (TensorBoard's Images tab): PNG bytes of an RGB image.
  void image(const std::string& tag, const std::string& png, int height, int width, int64_t step);
  // SessionLog START at `step`: TensorBoard drops events past it from a previous run, so a
  // resumed job's curves do not double back.
  void session_start(int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& serialized);
  std::string path_;
  std::FILE* file_ = nullptr;
  std::mutex mu_;
};

// Reads back the scalars of an event file: (tag, step, value), for tests and tools.
struct ScalarEvent {
  std::string tag;
  int64_t step;
  double value;
};
std::vector<ScalarEvent> read_scalar_events(const std::string& path, std::string* file_version = nullptr);

}  // namespace orchard
