#include "orchard/core/event_writer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/tfrecord.h"
#include "orchard/proto/event.pb.h"

namespace orchard {
namespace {

using test::TempDir;

double now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::vector<tensorflow::Event> read_events(const std::string& path) {
  TFRecordReader r(path);
  std::vector<tensorflow::Event> out;
  std::string rec;
  while (r.next(&rec)) {
    tensorflow::Event ev;
    EXPECT_TRUE(ev.ParseFromString(rec));
    out.push_back(ev);
  }
  return out;
}

TEST(EventWriter, FileNameAndFirstRecord) {
  TempDir dir;
  const std::string logdir = dir.file("model/train");  // created on demand
  const double before = now();
  EventWriter w(logdir);
  const std::filesystem::path path(w.path());
  EXPECT_EQ(path.parent_path().string(), logdir);
  EXPECT_EQ(path.filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  ASSERT_TRUE(std::filesystem::exists(path));

  // The first record is written and flushed at construction.
  const auto events = read_events(w.path());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GE(events[0].wall_time(), before - 1);
  EXPECT_LE(events[0].wall_time(), now() + 1);
}

TEST(EventWriter, ScalarsReadBack) {
  TempDir dir;
  std::string path;
  {
    EventWriter w(dir.str());
    path = w.path();
    w.scalar("loss", 2.5, 1);
    w.scalar("learning_rate", 0.1, 1);
    w.scalar("loss", 1.25, 2);
    w.scalar("Loss/total_loss", -3.0, 100000000000LL);
    w.flush();
  }
  std::string version;
  const auto scalars = read_scalar_events(path, &version);
  EXPECT_EQ(version, "brain.Event:2");
  ASSERT_EQ(scalars.size(), 4u);
  EXPECT_EQ(scalars[0].tag, "loss");
  EXPECT_EQ(scalars[0].step, 1);
  EXPECT_DOUBLE_EQ(scalars[0].value, 2.5);
  EXPECT_EQ(scalars[1].tag, "learning_rate");
  EXPECT_FLOAT_EQ(static_cast<float>(scalars[1].value), 0.1f);  // stored as float simple_value
  EXPECT_EQ(scalars[2].step, 2);
  EXPECT_DOUBLE_EQ(scalars[2].value, 1.25);
  EXPECT_EQ(scalars[3].tag, "Loss/total_loss");
  EXPECT_EQ(scalars[3].step, 100000000000LL);
  EXPECT_DOUBLE_EQ(scalars[3].value, -3.0);

  // The same through the raw protos: a Summary with one simple_value each.
  const auto events = read_events(path);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].summary().value(0).value_case(), tensorflow::Summary::Value::kSimpleValue);
}

TEST(EventWriter, SessionStartRecord) {
  TempDir dir;
  EventWriter w(dir.str());
  w.session_start(42);
  w.flush();
  const auto events = read_events(w.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step(), 42);
  EXPECT_EQ(events[1].session_log().status(), tensorflow::SessionLog::START);
  EXPECT_TRUE(read_scalar_events(w.path()).empty());
}

TEST(EventWriter, TwoWritersInOneDirectoryUseDifferentFiles) {
  TempDir dir;
  EventWriter a(dir.str()), b(dir.str());
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(test::list_dir(dir.str()).size(), 2u);
}

TEST(ReadScalarEvents, RecordThatIsNotAnEventIsADataError) {
  TempDir dir;
  const std::string path = dir.file("events.out.tfevents.bad");
  TFRecordWriter w(path);
  w.write("\xff\xff\xff\xff");  // not a valid protobuf message
  w.close();
  try {
    read_scalar_events(path);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace orchard
