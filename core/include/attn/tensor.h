// Tensor views (non-owning, strided) and owning tensors.
//
// A TensorView describes memory owned elsewhere: dtype, data pointer, shape and
// strides in elements. Core never copies a whole input tensor; kernels read
// views through their strides. Tensor owns 64-byte aligned float storage and
// is what core returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "attn/status.h"

namespace attn {

enum class DataType {
  kFloat32,
  kBool,  // one byte per element, 0 = false, anything else = true
  // bfloat16 bits (attn/half.h). Only SDPA's query, key and value take it,
  // and only in a call that computes in bfloat16 (attn/attention.h).
  kBFloat16,
};

const char* DataTypeName(DataType dtype);

using Shape = std::vector<int64_t>;

// "[2, 5, 64]"
std::string ShapeToString(const Shape& shape);

// Product of dims, or an error if a dim is negative or the product of the
// non-zero dims overflows int64 (a hostile shape must never turn into a huge
// allocation, nor overflow a stride of an empty tensor). `what` names the
// tensor in the message.
StatusOr<int64_t> CheckedNumElements(const Shape& shape, const std::string& what);

// Product of dims of a shape that has already passed CheckedNumElements.
int64_t NumElements(const Shape& shape);

// Row-major strides for `shape`, in elements (saturating at INT64_MAX).
Shape DenseStrides(const Shape& shape);

// A non-owning view. The caller keeps `data` alive while the view is used.
struct TensorView {
  DataType dtype = DataType::kFloat32;
  const void* data = nullptr;
  Shape shape;
  Shape strides;  // in elements, same length as shape

  static TensorView Dense(const float* data, Shape shape);
  // `data` holds one byte per element (0 = false).
  static TensorView DenseBool(const uint8_t* data, Shape shape);
  // `data` holds bfloat16 bits.
  static TensorView DenseBf16(const uint16_t* data, Shape shape);

  int rank() const { return static_cast<int>(shape.size()); }
  // Negative indices count from the end, as in Python.
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  int64_t stride(int i) const { return strides[i < 0 ? strides.size() + i : i]; }
  const float* f32() const { return static_cast<const float*>(data); }
  const uint8_t* u8() const { return static_cast<const uint8_t*>(data); }
  const uint16_t* bf16() const { return static_cast<const uint16_t*>(data); }
};

namespace detail {
// The allocation functions behind AlignedAllocator (core/src/tensor.cc).
void* AllocateBuffer(std::size_t bytes);
void FreeBuffer(void* p, std::size_t bytes) noexcept;
}  // namespace detail

// Allocator for large float buffers: 64-byte aligned (cache lines, AVX-512),
// and buffers of 4 MiB or more are 2 MiB aligned and advised to use
// transparent huge pages, so a fresh 100 MiB buffer takes 50 page faults,
// not 25,000. Elements are default-initialised: resize() does not zero-fill
// (use assign() for zeros), because most buffers are overwritten anyway.
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>& /*other*/) noexcept {}  // NOLINT
  T* allocate(std::size_t n) { return static_cast<T*>(detail::AllocateBuffer(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { detail::FreeBuffer(p, n * sizeof(T)); }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialise: no zero fill
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const AlignedAllocator<U>& /*other*/) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const AlignedAllocator<U>& /*other*/) const noexcept {
    return false;
  }
};

using FloatBuffer = std::vector<float, AlignedAllocator<float>>;

// An owning, dense, row-major float32 tensor.
struct Tensor {
  Shape shape;
  FloatBuffer data;

  Tensor() = default;
  // Zero-filled. The caller has validated the shape.
  explicit Tensor(Shape s);
  // Contents unspecified: for outputs that are overwritten in full.
  static Tensor Uninitialized(Shape s);
  Tensor(Shape s, std::initializer_list<float> values);

  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  TensorView view() const { return TensorView::Dense(data.data(), shape); }
};

}  // namespace attn
