// TensorBoard event files: TFRecord-framed tensorflow.Event protos, the first one carrying
// file_version "brain.Event:2". Named events.out.tfevents.<secs>.<host>.<pid>.<n> like
// PyTorch's SummaryWriter, so several writers can share a directory.
//
// On an object store (s3://, gs://) an object cannot be appended to: the events go to a local
// temporary file and flush() uploads the whole file as the object when `upload_interval_s` has
// passed since the last upload (TensorFlow's writers on GCS do the same); the destructor uploads
// the rest. A TensorBoard reading the bucket sees the events up to the last upload: at most
// that many seconds behind, never a cut record.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace orchard {

class EventWriter {
 public:
  explicit EventWriter(const std::string& dir, double upload_interval_s = 30);
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
  void upload_locked();
  std::string path_;
  std::string local_;  // the file written: path_, or the temporary copy of an object
  bool upload_ = false;
  double upload_interval_s_;
  double last_upload_ = 0;
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
