#include "orchard/core/error.h"

namespace orchard {

std::string where(const std::string& file, int64_t record, int64_t offset, const std::string& what) {
  std::string s = file;
  if (record >= 0) s += ": record " + std::to_string(record);
  if (offset >= 0)
    s += (record >= 0 ? " (byte offset " : ": byte offset ") + std::to_string(offset) + (record >= 0 ? ")" : "");
  return s + ": " + what;
}

}  // namespace orchard
