#include "kernels/primitive_cache.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attn/cpu_info.h"
#include "attn/half.h"
#include "support/isa_cap.h"

namespace attn::internal {
namespace {

// Enough for every block shape of many request shapes; a hostile stream of
// distinct shapes evicts old entries instead of growing memory.
constexpr size_t kMaxCachedPrimitives = 512;

void HashMix(size_t* h, int64_t v) {
  *h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (*h << 6) + (*h >> 2);
}

struct ShapeHash {
  size_t operator()(const MatmulShape& s) const {
    size_t h = 0;
    for (int64_t v : {s.m, s.n, s.k, s.lda, s.ldb, s.ldc, int64_t{s.threads}, s.batch,
                      s.a_batch_stride, s.b_batch_stride, s.c_batch_stride}) {
      HashMix(&h, v);
    }
    HashMix(&h, (s.b_transposed ? 1 : 0) | (s.has_bias ? 2 : 0) | (s.accumulate ? 4 : 0) |
                    (s.bf16 ? 8 : 0));
    return h;
  }
  size_t operator()(const SoftmaxShape& s) const {
    size_t h = 0;
    for (int64_t v : {s.m, s.n, int64_t{s.threads}}) HashMix(&h, v);
    return h;
  }
};

std::shared_ptr<const MatmulPrimitive> CreateMatmul(const MatmulShape& s) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  auto p = std::make_shared<MatmulPrimitive>();
  // [batch,] rows, cols with the given strides; the batch dim only when batched.
  auto desc = [&s](int64_t rows, int64_t cols, int64_t batch_stride, int64_t row_stride,
                   int64_t col_stride, dt type) {
    if (s.batch == 1)
      return dnnl::memory::desc(dims{rows, cols}, type, dims{row_stride, col_stride});
    return dnnl::memory::desc(dims{s.batch, rows, cols}, type,
                              dims{batch_stride, row_stride, col_stride});
  };
  const dt in = s.bf16 ? dt::bf16 : dt::f32;
  p->a = desc(s.m, s.k, s.a_batch_stride, s.lda, 1, in);
  p->b = s.b_transposed ? desc(s.k, s.n, s.b_batch_stride, 1, s.ldb, in)
                        : desc(s.k, s.n, s.b_batch_stride, s.ldb, 1, in);
  p->c = desc(s.m, s.n, s.c_batch_stride, s.ldc, 1, dt::f32);
  if (s.has_bias) {
    p->bias = s.batch == 1 ? dnnl::memory::desc(dims{1, s.n}, dt::f32, dims{s.n, 1})
                           : dnnl::memory::desc(dims{1, 1, s.n}, dt::f32, dims{s.n, s.n, 1});
  }

  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  ScopedOmpThreads threads(s.threads);
  auto md = s.has_bias ? dnnl::matmul::desc(p->a, p->b, p->bias, p->c)
                       : dnnl::matmul::desc(p->a, p->b, p->c);
  dnnl::matmul::primitive_desc pd(md, attr, CpuEngine());
  p->scratchpad = pd.scratchpad_desc();
  p->impl = pd.impl_info_str();
  p->team_set_at_execute = p->impl.rfind("brg", 0) != 0;
  p->primitive = dnnl::matmul(pd);
  return p;
}

std::shared_ptr<const SoftmaxPrimitive> CreateSoftmax(const SoftmaxShape& s) {
  auto p = std::make_shared<SoftmaxPrimitive>();
  p->data =
      dnnl::memory::desc({s.m, s.n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  ScopedOmpThreads threads(s.threads);
  dnnl::softmax_forward::primitive_desc pd(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, p->data, 1), attr,
      CpuEngine());
  p->scratchpad = pd.scratchpad_desc();
  p->impl = pd.impl_info_str();
  p->primitive = dnnl::softmax_forward(pd);
  return p;
}

// A bounded LRU map from shape to primitive. Thread-safe; entries handed out
// stay valid after eviction (shared ownership).
template <typename Shape, typename Primitive>
class PrimitiveCache {
 public:
  using Factory = std::shared_ptr<const Primitive> (*)(const Shape&);
  explicit PrimitiveCache(Factory create) : create_(create) {}

  std::shared_ptr<const Primitive> Get(const Shape& shape) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(shape);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    auto created = create_(shape);
    lru_.emplace_front(shape, created);
    index_[shape] = lru_.begin();
    if (lru_.size() > kMaxCachedPrimitives) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return created;
  }

 private:
  Factory create_;
  std::mutex mu_;
  using Entry = std::pair<Shape, std::shared_ptr<const Primitive>>;
  std::list<Entry> lru_;
  std::unordered_map<Shape, typename std::list<Entry>::iterator, ShapeHash> index_;
};

// Never destroyed: primitives may be used until exit.
auto& Matmuls() {
  static auto* cache = new PrimitiveCache<MatmulShape, MatmulPrimitive>(CreateMatmul);
  return *cache;
}
auto& Softmaxes() {
  static auto* cache = new PrimitiveCache<SoftmaxShape, SoftmaxPrimitive>(CreateSoftmax);
  return *cache;
}

}  // namespace

bool MatmulShape::operator==(const MatmulShape& o) const {
  return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
         b_transposed == o.b_transposed && has_bias == o.has_bias && accumulate == o.accumulate &&
         threads == o.threads && batch == o.batch && a_batch_stride == o.a_batch_stride &&
         b_batch_stride == o.b_batch_stride && c_batch_stride == o.c_batch_stride && bf16 == o.bf16;
}

dnnl::engine& CpuEngine() {
  ApplyOneDnnIsaCap();
  // Every primitive core makes goes through the bounded caches above, so
  // oneDNN's own primitive cache (1,024 entries by default) would only keep
  // up to 1,024 more, already evicted from ours, alive: on AVX-512, where
  // brgemm generates code per shape, that was ~30 MiB of a session soak's
  // RSS (104 -> 75 MiB). One cache, one bound; ONEDNN_PRIMITIVE_CACHE_CAPACITY
  // (or DNNL_...) still sets oneDNN's when given.
  static const bool single_cache = [] {
    if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == nullptr &&
        std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") == nullptr) {
      dnnl::set_primitive_cache_capacity(0);
    }
    return true;
  }();
  (void)single_cache;
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

bool SoftmaxShape::operator==(const SoftmaxShape& o) const {
  return m == o.m && n == o.n && threads == o.threads;
}

std::shared_ptr<const MatmulPrimitive> GetMatmul(const MatmulShape& shape) {
  return Matmuls().Get(shape);
}

std::shared_ptr<const SoftmaxPrimitive> GetSoftmax(const SoftmaxShape& shape) {
  return Softmaxes().Get(shape);
}

namespace {

// Primitives a thread keeps bound; the blocked kernel uses a handful of block
// shapes per request shape, so this covers several request shapes at once.
constexpr size_t kBoundPerThread = 16;

struct BoundMatmul {
  MatmulShape shape;
  std::shared_ptr<const MatmulPrimitive> prim;  // keeps the primitive alive past eviction
  dnnl::memory a, b, c, bias, scratchpad;
};

struct BoundSoftmax {
  SoftmaxShape shape;
  std::shared_ptr<const SoftmaxPrimitive> prim;
  dnnl::memory data, scratchpad;
};

// The calling thread's oneDNN state: a stream, a scratchpad buffer that grows
// to the largest primitive run here (every primitive has a user scratchpad),
// and the most recently used primitives, most recent first.
class ThreadExecution {
 public:
  static ThreadExecution& Get() {
    thread_local ThreadExecution execution;
    return execution;
  }

  dnnl_stream_t Stream() {
    if (!stream_) stream_ = std::make_unique<dnnl::stream>(CpuEngine());
    return stream_->get();
  }

  void* Scratch(const dnnl::memory::desc& scratchpad) {
    const size_t floats = (scratchpad.get_size() + sizeof(float) - 1) / sizeof(float) + 1;
    if (scratch_.size() < floats) scratch_.resize(floats);
    return scratch_.data();
  }

  // The bound entry for `shape`, moved to the front; `bind` makes one on a miss.
  template <typename Bound, typename Shape, typename Bind>
  static Bound& Find(std::vector<Bound>& bound, const Shape& shape, Bind bind) {
    for (size_t i = 0; i < bound.size(); ++i) {
      if (bound[i].shape == shape) {
        if (i > 0) std::rotate(bound.begin(), bound.begin() + i, bound.begin() + i + 1);
        return bound.front();
      }
    }
    if (bound.size() >= kBoundPerThread) bound.pop_back();
    bound.insert(bound.begin(), bind());
    return bound.front();
  }

  std::vector<BoundMatmul> matmuls;
  std::vector<BoundSoftmax> softmaxes;

 private:
  FloatBuffer scratch_;
  std::unique_ptr<dnnl::stream> stream_;
};

void SetHandle(const dnnl::memory& m, const void* data) {
  // oneDNN takes non-const handles; it only reads inputs.
  m.set_data_handle(const_cast<void*>(data));
}

void Execute(const dnnl::primitive& p, dnnl_stream_t stream, int nargs,
             const dnnl_exec_arg_t* args) {
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), stream, nargs, args),
                          "could not execute a primitive");
}

}  // namespace

namespace {

void RunMatmul(const MatmulShape& shape, const void* a, const void* b, float* c,
               const float* bias) {
  ThreadExecution& exec = ThreadExecution::Get();
  BoundMatmul& m = ThreadExecution::Find(exec.matmuls, shape, [&shape] {
    BoundMatmul bound{shape, GetMatmul(shape), {}, {}, {}, {}, {}};
    auto& eng = CpuEngine();
    const MatmulPrimitive& p = *bound.prim;
    bound.a = dnnl::memory(p.a, eng, DNNL_MEMORY_NONE);
    bound.b = dnnl::memory(p.b, eng, DNNL_MEMORY_NONE);
    bound.c = dnnl::memory(p.c, eng, DNNL_MEMORY_NONE);
    if (shape.has_bias) bound.bias = dnnl::memory(p.bias, eng, DNNL_MEMORY_NONE);
    bound.scratchpad = dnnl::memory(p.scratchpad, eng, DNNL_MEMORY_NONE);
    return bound;
  });
  SetHandle(m.a, a);
  SetHandle(m.b, b);
  SetHandle(m.c, c);
  SetHandle(m.scratchpad, exec.Scratch(m.prim->scratchpad));
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m.a.get()},
                             {DNNL_ARG_WEIGHTS, m.b.get()},
                             {DNNL_ARG_DST, m.c.get()},
                             {DNNL_ARG_SCRATCHPAD, m.scratchpad.get()},
                             {DNNL_ARG_BIAS, nullptr}};
  int nargs = 4;
  if (shape.has_bias) {
    SetHandle(m.bias, bias);
    args[nargs++].memory = m.bias.get();
  }
  // The thread budget must hold at execute time too for gemm:jit (a 1-thread
  // call must not start a team); brgemm needs nothing here.
  std::optional<ScopedOmpThreads> team;
  if (m.prim->team_set_at_execute) team.emplace(shape.threads);
  Execute(m.prim->primitive, exec.Stream(), nargs, args);
}

// The elements an operand's shape spans from its first element: rows of
// `cols` at `row_stride` (column stride 1), or columns of `rows` at
// `col_stride` when transposed, `batch` times at `batch_stride`.
int64_t Span(int64_t batch, int64_t batch_stride, int64_t outer, int64_t outer_stride,
             int64_t inner) {
  if (batch == 0 || outer == 0 || inner == 0) return 0;
  return (batch - 1) * batch_stride + (outer - 1) * outer_stride + inner;
}

}  // namespace

void Matmul(const MatmulShape& shape, const float* a, const float* b, float* c, const float* bias) {
  RunMatmul(shape, a, b, c, bias);
}

void MatmulBf16(MatmulShape shape, const uint16_t* a, const uint16_t* b, float* c,
                const float* bias) {
  if (!Bf16Emulated()) {
    shape.bf16 = true;
    RunMatmul(shape, a, b, c, bias);
    return;
  }
  // Emulation: widen the spans A and B cover (layout kept, so the float32
  // primitive takes the same strides), then the float32 matmul.
  thread_local FloatBuffer wa, wb;
  const int64_t na = Span(shape.batch, shape.a_batch_stride, shape.m, shape.lda, shape.k);
  const int64_t nb = shape.b_transposed
                         ? Span(shape.batch, shape.b_batch_stride, shape.n, shape.ldb, shape.k)
                         : Span(shape.batch, shape.b_batch_stride, shape.k, shape.ldb, shape.n);
  if (static_cast<int64_t>(wa.size()) < na) wa.resize(static_cast<size_t>(na));
  if (static_cast<int64_t>(wb.size()) < nb) wb.resize(static_cast<size_t>(nb));
  HalfToFloat(HalfType::kBFloat16, a, wa.data(), na);
  HalfToFloat(HalfType::kBFloat16, b, wb.data(), nb);
  shape.bf16 = false;
  RunMatmul(shape, wa.data(), wb.data(), c, bias);
}

void Softmax(const SoftmaxShape& shape, float* data) {
  ThreadExecution& exec = ThreadExecution::Get();
  BoundSoftmax& s = ThreadExecution::Find(exec.softmaxes, shape, [&shape] {
    BoundSoftmax bound{shape, GetSoftmax(shape), {}, {}};
    auto& eng = CpuEngine();
    bound.data = dnnl::memory(bound.prim->data, eng, DNNL_MEMORY_NONE);
    bound.scratchpad = dnnl::memory(bound.prim->scratchpad, eng, DNNL_MEMORY_NONE);
    return bound;
  });
  SetHandle(s.data, data);
  SetHandle(s.scratchpad, exec.Scratch(s.prim->scratchpad));
  const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, s.data.get()},
                                   {DNNL_ARG_DST, s.data.get()},
                                   {DNNL_ARG_SCRATCHPAD, s.scratchpad.get()}};
  ScopedOmpThreads team(shape.threads);  // softmax sizes its team when it runs
  Execute(s.prim->primitive, exec.Stream(), 3, args);
}

}  // namespace attn::internal
