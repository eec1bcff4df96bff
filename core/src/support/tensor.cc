#include "attn/tensor.h"

#include <sys/mman.h>

#include <limits>
#include <new>

namespace attn {

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kBool:
      return "bool";
    case DataType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

StatusOr<int64_t> CheckedNumElements(const Shape& shape, const std::string& what) {
  // The product of the non-zero dims must fit too: an empty tensor such as
  // [0, 2^40, 2^40] has no elements, but products of its other dims (strides,
  // row counts) would still overflow.
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) {
      return Status::InvalidArgument(what + ": dims must be non-negative, got " +
                                     ShapeToString(shape));
    }
    if (d == 0) {
      empty = true;
      continue;
    }
    if (nonzero > std::numeric_limits<int64_t>::max() / d) {
      return Status::InvalidArgument(what + ": element count of " + ShapeToString(shape) +
                                     " overflows int64");
    }
    nonzero *= d;
  }
  return empty ? 0 : nonzero;
}

Shape DenseStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Saturate: a hostile shape must not overflow here, before validation
    // (CheckedNumElements) gets to refuse it.
    if (__builtin_mul_overflow(s, shape[i], &s)) s = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

namespace {

TensorView DenseView(DataType dtype, const void* data, Shape shape) {
  TensorView v;
  v.dtype = dtype;
  v.data = data;
  v.strides = DenseStrides(shape);
  v.shape = std::move(shape);
  return v;
}

}  // namespace

TensorView TensorView::Dense(const float* data, Shape shape) {
  return DenseView(DataType::kFloat32, data, std::move(shape));
}

TensorView TensorView::DenseBool(const uint8_t* data, Shape shape) {
  return DenseView(DataType::kBool, data, std::move(shape));
}

TensorView TensorView::DenseBf16(const uint16_t* data, Shape shape) {
  return DenseView(DataType::kBFloat16, data, std::move(shape));
}

namespace {
constexpr std::size_t kCacheLine = 64;
constexpr std::size_t kHugePage = 2 << 20;
constexpr std::size_t kHugeThreshold = 4 << 20;
}  // namespace

namespace detail {

void* AllocateBuffer(std::size_t bytes) {
  if (bytes < kHugeThreshold) return ::operator new (bytes, std::align_val_t{kCacheLine});
  void* p = ::operator new (bytes, std::align_val_t{kHugePage});
  // Advice only: without THP (or in "never" mode) this fails harmlessly.
  madvise(p, bytes & ~(kHugePage - 1), MADV_HUGEPAGE);
  return p;
}

void FreeBuffer(void* p, std::size_t bytes) noexcept {
  ::operator delete (p, std::align_val_t{bytes < kHugeThreshold ? kCacheLine : kHugePage});
}

}  // namespace detail

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::Uninitialized(Shape s) {
  Tensor t;
  t.data.resize(static_cast<size_t>(NumElements(s)));
  t.shape = std::move(s);
  return t;
}

Tensor::Tensor(Shape s) : shape(std::move(s)) {
  data.assign(static_cast<size_t>(NumElements(shape)), 0.0f);
}

Tensor::Tensor(Shape s, std::initializer_list<float> values)
    : shape(std::move(s)), data(values.begin(), values.end()) {}

}  // namespace attn
