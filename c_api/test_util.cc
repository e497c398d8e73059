#include "c_api/test_util.h"

#include <cstring>
#include <string>

namespace gpe::c_api_test {

DLTensor Tensor(const void* data, DLDataTypeCode code, int bits, std::vector<int64_t>* shape,
                std::vector<int64_t>* strides) {
  DLTensor t;
  std::memset(&t, 0, sizeof t);
  t.data = const_cast<void*>(data);
  t.device.device_type = kDLCPU;
  t.ndim = static_cast<int32_t>(shape->size());
  t.dtype.code = static_cast<uint8_t>(code);
  t.dtype.bits = static_cast<uint8_t>(bits);
  t.dtype.lanes = 1;
  t.shape = shape->data();
  t.strides = strides ? strides->data() : nullptr;
  return t;
}

std::vector<double> Random(std::mt19937_64* rng, size_t n, double scale) {
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = dist(*rng);
  return v;
}

double CentralDifference(std::vector<double>* param, size_t i, double h,
                         const std::function<double()>& loss) {
  const double keep = (*param)[i];
  (*param)[i] = keep + h;
  const double lp = loss();
  (*param)[i] = keep - h;
  const double lm = loss();
  (*param)[i] = keep;
  return (lp - lm) / (2 * h);
}

bool HasMessage(const char* part) {
  return std::string(gpe_last_error_message()).find(part) != std::string::npos;
}

}  // namespace gpe::c_api_test
