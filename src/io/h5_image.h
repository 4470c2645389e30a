// Whole-file HDF5 writes that cannot leave a damaged file, and reads that
// detect one.
//
// A results file is built in memory (HDF5's core driver), so HDF5 itself never
// writes to disk: a full disk or a file-size limit cannot fail inside HDF5
// (whose close path does not report a failed flush), only in write_atomically,
// which checks every write, fsync and close and replaces <path> by rename only
// when all succeeded.
//
// The first 512 bytes of such a file are an HDF5 user block (HDF5 readers, h5py
// included, skip it) holding one text line: "triforce-h5 crc32 XXXXXXXX bytes N".
// read_checked compares both with the bytes after the user block, so a
// truncated file or one with garbage bytes anywhere (data included: HDF5's own
// format before 1.10 checksums nothing) is refused before HDF5 parses it.
// Files written before the checksum (HDF5 signature at byte 0) are read
// unchecked, as before.
#pragma once
#include <string>
#include <vector>

#include "io/h5_file.h"

namespace tf::h5 {

using Bytes = std::vector<char>;

// An empty in-memory file with the checksum user block (name: for messages).
Handle create_in_memory(const std::string& name);
// An in-memory file opened from bytes; write = false opens read-only.
Handle open_in_memory(const Bytes& bytes, const std::string& name, bool write);
// The bytes of an in-memory file (flushed), with its checksum line filled in.
Bytes image_of(hid_t file, const std::string& name);

// Reads <path> whole and verifies its checksum line: one-line tf::Error naming
// the file when it is unreadable, truncated or damaged.
Bytes read_checked(const std::string& path);
// read_checked, then open read-only in memory.
Handle open_checked(const std::string& path);

// Writes bytes to <path>.tmp (checked writes, fsync), then renames it over
// <path> and syncs the folder. Returns "" on success, else what failed
// ("write /x/out.h5.tmp: File too large"); on failure <path> is untouched
// and the .tmp is removed.
std::string write_atomically(const std::string& path, const Bytes& bytes);

// CRC-32 (IEEE 802.3, as zlib's crc32) of n bytes.
uint32_t crc32(const char* data, size_t n);

inline constexpr size_t kUserBlock = 512;

}  // namespace tf::h5
