// Integrity of a zip archive (libtorch's checkpoint container): every entry's CRC-32 as the
// central directory records it. libtorch reads entries without checking them, so a flipped
// bit in a checkpoint's weights would otherwise be restored silently.
#pragma once

#include <string>

namespace orchard {

// Throws DataError naming the file and the first entry that is missing, out of bounds or fails
// its CRC-32 (a truncated file fails at its end-of-central-directory record). Reads each
// entry once, in pieces; stored and deflated entries are checked alike (the CRC is of the
// stored bytes only for stored entries, which is what libtorch writes; a deflated entry is
// inflated to check it).
void check_zip_crcs(const std::string& path);

}  // namespace orchard
