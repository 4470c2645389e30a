#include "io/h5_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "core/check.h"

namespace tf::h5 {

namespace {

// "file.h5:/runs/000001" for error messages.
std::string where(hid_t loc) {
  char file[1024] = {0}, obj[1024] = {0};
  if (H5Fget_name(loc, file, sizeof file) < 0) file[0] = 0;
  if (H5Iget_name(loc, obj, sizeof obj) < 0) obj[0] = 0;
  return std::string(file) + ":" + obj;
}

#define H5_CHECK(expr, loc, what)                                                         \
  do {                                                                                    \
    if ((expr) < 0) TF_FAIL(where(loc) << ": HDF5 failed to " << what);                   \
  } while (0)

Handle string_type() {
  Handle t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

template <class T>
void write_vec(hid_t loc, const std::string& name, const std::vector<T>& v, hid_t mem_type, hid_t file_type,
               const std::string& units) {
  hsize_t n = v.size();
  Handle space(H5Screate_simple(1, &n, nullptr));
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl, 1);
  Handle ds(H5Dcreate2(loc, name.c_str(), file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(ds.id(), loc, "create dataset " << name);
  if (n) H5_CHECK(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), loc, "write dataset " << name);
  if (!units.empty()) set_attr(ds, "units", units);
}

}  // namespace

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    close();
    id_ = o.id_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Handle::close() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Handle create_file(const std::string& path) {
  quiet();
  // Earliest format bound: attributes stay compact. With >= 1.8 a run group's ~80 attributes go
  // dense, and H5Ocopy (triforce merge) of dense variable-length string attributes segfaults in
  // HDF5 1.10.8 (Debian 12; h5copy crashes the same way). Attributes here are small scalars.
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_libver_bounds(fapl, H5F_LIBVER_EARLIEST, H5F_LIBVER_LATEST);
  Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  TF_CHECK(f.valid(), path << ": cannot create the HDF5 file");
  return f;
}

Handle open_file(const std::string& path, bool write) {
  quiet();
  TF_CHECK(std::filesystem::exists(path), path << ": no such file");
  Handle f(H5Fopen(path.c_str(), write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT));
  TF_CHECK(f.valid(), path << ": not a readable HDF5 file");
  return f;
}

bool exists(hid_t loc, const std::string& path) {
  std::string prefix;
  size_t start = path[0] == '/' ? 1 : 0;
  if (start) prefix = "/";
  while (true) {
    const size_t slash = path.find('/', start);
    prefix += path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) return true;
    prefix += "/";
    start = slash + 1;
  }
}

Handle open_group(hid_t loc, const std::string& path) {
  TF_CHECK(exists(loc, path), where(loc) << ": no group '" << path << "'");
  Handle g(H5Gopen2(loc, path.c_str(), H5P_DEFAULT));
  TF_CHECK(g.valid(), where(loc) << ": '" << path << "' is not a readable group");
  return g;
}

Handle create_group(hid_t loc, const std::string& path) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl, 1);
  Handle g(H5Gcreate2(loc, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT));
  TF_CHECK(g.valid(), where(loc) << ": cannot create group '" << path << "'");
  return g;
}

void set_attr(hid_t obj, const std::string& name, const AttrValue& v) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle space(H5Screate(H5S_SCALAR));
  if (auto* i = std::get_if<int64_t>(&v)) {
    Handle a(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT));
    H5_CHECK(a.id(), obj, "create attribute " << name);
    H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, i), obj, "write attribute " << name);
  } else if (auto* d = std::get_if<double>(&v)) {
    Handle a(H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT));
    H5_CHECK(a.id(), obj, "create attribute " << name);
    H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, d), obj, "write attribute " << name);
  } else {
    Handle t = string_type();
    Handle a(H5Acreate2(obj, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT));
    H5_CHECK(a.id(), obj, "create attribute " << name);
    const char* p = std::get<std::string>(v).c_str();
    H5_CHECK(H5Awrite(a, t, &p), obj, "write attribute " << name);
  }
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

AttrValue get_attr(hid_t obj, const std::string& name) {
  TF_CHECK(has_attr(obj, name), where(obj) << ": missing attribute '" << name << "'");
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  Handle t(H5Aget_type(a));
  Handle space(H5Aget_space(a));
  TF_CHECK(H5Sget_simple_extent_npoints(space) == 1, where(obj) << ": attribute '" << name << "' is not a scalar");
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: {
      int64_t v = 0;
      H5_CHECK(H5Aread(a, H5T_NATIVE_INT64, &v), obj, "read attribute " << name);
      return v;
    }
    case H5T_FLOAT: {
      double v = 0;
      H5_CHECK(H5Aread(a, H5T_NATIVE_DOUBLE, &v), obj, "read attribute " << name);
      return v;
    }
    case H5T_STRING: {
      if (H5Tis_variable_str(t) > 0) {
        Handle mt = string_type();
        char* p = nullptr;
        H5_CHECK(H5Aread(a, mt, &p), obj, "read attribute " << name);
        std::string s = p ? p : "";
        H5free_memory(p);
        return s;
      }
      const size_t n = H5Tget_size(t);
      std::string s(n, '\0');
      H5_CHECK(H5Aread(a, t, s.data()), obj, "read attribute " << name);
      s.resize(s.find('\0') == std::string::npos ? n : s.find('\0'));
      return s;
    }
    default: break;
  }
  TF_FAIL(where(obj) << ": attribute '" << name << "' is not an integer, float or string");
}

std::string get_string_attr(hid_t obj, const std::string& name) {
  AttrValue v = get_attr(obj, name);
  TF_CHECK(std::holds_alternative<std::string>(v), where(obj) << ": attribute '" << name << "' is not a string");
  return std::get<std::string>(v);
}

int64_t get_int_attr(hid_t obj, const std::string& name) {
  AttrValue v = get_attr(obj, name);
  TF_CHECK(std::holds_alternative<int64_t>(v), where(obj) << ": attribute '" << name << "' is not an integer");
  return std::get<int64_t>(v);
}

double get_real_attr(hid_t obj, const std::string& name) {
  AttrValue v = get_attr(obj, name);
  if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
  TF_CHECK(std::holds_alternative<double>(v), where(obj) << ": attribute '" << name << "' is not a number");
  return std::get<double>(v);
}

std::vector<std::string> attr_names(hid_t obj) {
  H5O_info_t info;
  H5_CHECK(H5Oget_info2(obj, &info, H5O_INFO_NUM_ATTRS), obj, "list attributes");
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    char buf[512];
    if (H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf, sizeof buf, H5P_DEFAULT) >= 0)
      out.emplace_back(buf);
  }
  return out;
}

void copy_attrs(hid_t src, hid_t dst) {
  for (const auto& n : attr_names(src)) set_attr(dst, n, get_attr(src, n));
}

std::vector<std::string> member_names(hid_t group) {
  H5G_info_t info;
  H5_CHECK(H5Gget_info(group, &info), group, "list members");
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char buf[512];
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf, sizeof buf, H5P_DEFAULT) >= 0)
      out.emplace_back(buf);
  }
  return out;
}

void write_string_dataset(hid_t loc, const std::string& name, const std::string& text) {
  Handle t = string_type();
  Handle space(H5Screate(H5S_SCALAR));
  Handle ds(H5Dcreate2(loc, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(ds.id(), loc, "create dataset " << name);
  const char* p = text.c_str();
  H5_CHECK(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), loc, "write dataset " << name);
}

std::string read_string_dataset(hid_t loc, const std::string& name) {
  TF_CHECK(exists(loc, name), where(loc) << ": missing dataset '" << name << "'");
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT));
  Handle t = string_type();
  char* p = nullptr;
  H5_CHECK(H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), loc, "read dataset " << name);
  std::string s = p ? p : "";
  H5free_memory(p);
  return s;
}

void write_vector(hid_t loc, const std::string& name, const std::vector<int32_t>& v, const std::string& units) {
  write_vec(loc, name, v, H5T_NATIVE_INT32, H5T_STD_I32LE, units);
}
void write_vector(hid_t loc, const std::string& name, const std::vector<int64_t>& v, const std::string& units) {
  write_vec(loc, name, v, H5T_NATIVE_INT64, H5T_STD_I64LE, units);
}
void write_vector(hid_t loc, const std::string& name, const std::vector<double>& v, const std::string& units) {
  write_vec(loc, name, v, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, units);
}

std::vector<int64_t> read_int_vector(hid_t loc, const std::string& name) {
  TF_CHECK(exists(loc, name), where(loc) << ": missing dataset '" << name << "'");
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT));
  Handle space(H5Dget_space(ds));
  TF_CHECK(H5Sget_simple_extent_ndims(space) == 1, where(loc) << ": dataset '" << name << "' is not 1-D");
  std::vector<int64_t> v(size_t(H5Sget_simple_extent_npoints(space)));
  if (!v.empty())
    H5_CHECK(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), loc, "read dataset " << name);
  return v;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  TF_CHECK(fd >= 0, path << ": cannot open to sync");
  const int rc = ::fsync(fd);
  ::close(fd);
  TF_CHECK(rc == 0, path << ": fsync failed");
  const std::string dir = std::filesystem::path(path).parent_path().empty()
                              ? "."
                              : std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace tf::h5
