#include "io/h5_array.h"

#include <H5Cpp.h>

#include <cstdio>
#include <filesystem>

#include "core/check.h"

namespace tf {

namespace {
H5::PredType h5_type(DType dt) {
  switch (dt) {
    case DType::F32: return H5::PredType::NATIVE_FLOAT;
    case DType::I32: return H5::PredType::NATIVE_INT32;
    default: break;
  }
  TF_FAIL("HDF5 arrays support f32 and i32, not " << dtype_name(dt));
}
}  // namespace

void write_h5_array(const std::string& path, const std::string& dataset, const Tensor& t,
                    const std::map<std::string, std::string>& string_attrs) {
  TF_CHECK(t.device == Device::CPU, path << ": only host tensors can be written");
  const std::string tmp = path + ".tmp";
  try {
    H5::Exception::dontPrint();
    H5::H5File file(tmp, H5F_ACC_TRUNC);
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    H5::DataSpace space(int(dims.size()), dims.data());
    H5::DataSet ds = file.createDataSet(dataset, h5_type(t.dtype), space);
    ds.write(t.data, h5_type(t.dtype));
    for (const auto& [k, v] : string_attrs) {
      H5::StrType st(H5::PredType::C_S1, v.size() ? v.size() : 1);
      H5::Attribute a = file.createAttribute(k, st, H5::DataSpace(H5S_SCALAR));
      a.write(st, v);
    }
    file.close();
  } catch (const H5::Exception& e) {
    std::remove(tmp.c_str());
    TF_FAIL(path << ": HDF5 write failed: " << e.getDetailMsg());
  }
  std::filesystem::rename(tmp, path);
}

Tensor read_h5_array(const std::string& path, const std::string& dataset) {
  try {
    H5::Exception::dontPrint();
    H5::H5File file(path, H5F_ACC_RDONLY);
    H5::DataSet ds = file.openDataSet(dataset);
    H5::DataSpace space = ds.getSpace();
    int nd = space.getSimpleExtentNdims();
    std::vector<hsize_t> dims(nd);
    space.getSimpleExtentDims(dims.data());
    std::vector<int64_t> shape(dims.begin(), dims.end());
    H5T_class_t cls = ds.getTypeClass();
    DType dt = cls == H5T_FLOAT ? DType::F32 : DType::I32;
    TF_CHECK(cls == H5T_FLOAT || cls == H5T_INTEGER, path << ":" << dataset << ": expected a numeric dataset");
    Tensor t = Tensor::cpu(dt, shape);
    ds.read(t.data, h5_type(dt));
    return t;
  } catch (const H5::Exception& e) {
    TF_FAIL(path << ": cannot read dataset '" << dataset << "': " << e.getDetailMsg());
  }
}

}  // namespace tf
