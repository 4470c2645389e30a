// .npy: magic, version 1/2/3 header length, the python-dict header (descr,
// fortran_order, shape), the data size; then the conversion to a tensor.
#include "fuzz_input.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tf::fuzz::write_input(data, size, "array.npy");
  try {
    tf::read_npy_array(path);
    tf::read_npy(path);
  } catch (const tf::Error&) {
  }
  return 0;
}
