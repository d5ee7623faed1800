// Errors carry where things went wrong (file, record index or byte offset, field) so
// that the CLI can print one clear line and exit non-zero.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace orchard {

// Any error a user can fix: bad flags, bad data, missing files.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Malformed or unreadable input data. The message names the file and the record or offset.
class DataError : public Error {
 public:
  using Error::Error;
};

// Formats "<file>: record <r> (offset <o>): <what>", leaving out the parts that are unknown (< 0).
std::string where(const std::string& file, int64_t record, int64_t offset, const std::string& what);

}  // namespace orchard
