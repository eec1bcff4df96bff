// Comparing float32 results with float64 references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace attn_test {

// Passes when every element satisfies |got - want| <= rtol * max(|want|, floor).
// `floor` is the magnitude of what was averaged (max |V| for outputs): an
// output near zero is a cancellation of terms of that size, so a purely
// relative test there would measure rounding noise, not correctness.
inline ::testing::AssertionResult AllClose(const float* got, const std::vector<double>& want,
                                           double rtol, double floor) {
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i];
    const double tol = rtol * std::max(std::abs(want[i]), floor);
    const double err = std::abs(g - want[i]);
    if (!(err <= tol) || std::isnan(g) != std::isnan(want[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
      worst = std::max(worst, err / std::max(std::abs(want[i]), floor));
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << bad << " of " << want.size() << " elements differ; first at " << first << ": got "
     << got[first] << ", want " << want[first] << "; worst relative error " << worst;
  return ::testing::AssertionFailure() << os.str();
}

inline double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace attn_test
