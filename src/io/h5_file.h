// Small RAII layer over the HDF5 C API for the results files: handles that
// close themselves, scalar attributes (int64, double, UTF-8 string), 1-D
// datasets, attribute listing and copying. Every failure throws tf::Error
// naming the file and the object.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace tf::h5 {

// Owns one hid_t; closes it with the right H5*close for its type.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept;
  ~Handle() { close(); }
  hid_t id() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void close();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using AttrValue = std::variant<int64_t, double, std::string>;

// Silences HDF5's own error printing (we throw one-line errors instead).
void quiet();

Handle create_file(const std::string& path);  // truncates
Handle open_file(const std::string& path, bool write);
bool exists(hid_t loc, const std::string& path);  // a link at path (intermediate groups checked)
Handle open_group(hid_t loc, const std::string& path);
Handle create_group(hid_t loc, const std::string& path);  // creates missing parents

void set_attr(hid_t obj, const std::string& name, const AttrValue& v);
bool has_attr(hid_t obj, const std::string& name);
AttrValue get_attr(hid_t obj, const std::string& name);  // ints -> int64, floats -> double, strings
std::string get_string_attr(hid_t obj, const std::string& name);
int64_t get_int_attr(hid_t obj, const std::string& name);
double get_real_attr(hid_t obj, const std::string& name);
std::vector<std::string> attr_names(hid_t obj);
// Copies every attribute of src onto dst (overwriting same-named ones).
void copy_attrs(hid_t src, hid_t dst);
std::vector<std::string> member_names(hid_t group);

// A scalar UTF-8 string dataset (e.g. the resolved config text).
void write_string_dataset(hid_t loc, const std::string& name, const std::string& text);
std::string read_string_dataset(hid_t loc, const std::string& name);

// 1-D datasets; `units` goes to a "units" attribute when non-empty.
void write_vector(hid_t loc, const std::string& name, const std::vector<int32_t>& v, const std::string& units = "");
void write_vector(hid_t loc, const std::string& name, const std::vector<int64_t>& v, const std::string& units = "");
void write_vector(hid_t loc, const std::string& name, const std::vector<double>& v, const std::string& units = "");
std::vector<int64_t> read_int_vector(hid_t loc, const std::string& name);

// Flushes the OS buffers of a closed file (and of its folder entry) to disk.
void fsync_path(const std::string& path);

}  // namespace tf::h5
