#include "primitive_cache.h"

#include <functional>
#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

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
    for (int64_t v : {s.m, s.n, s.k, s.lda, s.ldb, s.ldc, int64_t{s.threads}}) HashMix(&h, v);
    HashMix(&h, (s.b_transposed ? 1 : 0) | (s.has_bias ? 2 : 0) | (s.accumulate ? 4 : 0));
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
  p->a = dnnl::memory::desc(dims{s.m, s.k}, dt::f32, dims{s.lda, 1});
  p->b = s.b_transposed ? dnnl::memory::desc(dims{s.k, s.n}, dt::f32, dims{1, s.ldb})
                        : dnnl::memory::desc(dims{s.k, s.n}, dt::f32, dims{s.ldb, 1});
  p->c = dnnl::memory::desc(dims{s.m, s.n}, dt::f32, dims{s.ldc, 1});
  if (s.has_bias) p->bias = dnnl::memory::desc(dims{1, s.n}, dt::f32, dims{s.n, 1});

  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  ScopedOmpThreads threads(s.threads);
  auto desc = s.has_bias ? dnnl::matmul::desc(p->a, p->b, p->bias, p->c)
                         : dnnl::matmul::desc(p->a, p->b, p->c);
  dnnl::matmul::primitive_desc pd(desc, attr, CpuEngine());
  p->scratchpad = pd.scratchpad_desc();
  p->impl = pd.impl_info_str();
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
         threads == o.threads;
}

dnnl::engine& CpuEngine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

ThreadExecution& ThreadExecution::Get() {
  thread_local ThreadExecution execution;
  return execution;
}

void* ThreadExecution::Scratch(const dnnl::memory::desc& scratchpad) {
  const size_t floats = (scratchpad.get_size() + sizeof(float) - 1) / sizeof(float) + 1;
  if (scratch_.size() < floats) scratch_.resize(floats);
  return scratch_.data();
}

dnnl::stream& ThreadExecution::Stream() {
  if (!stream_) stream_ = std::make_unique<dnnl::stream>(CpuEngine());
  return *stream_;
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

void RunSoftmax(const SoftmaxPrimitive& p, dnnl::stream& stream, float* data, void* scratchpad) {
  auto& eng = CpuEngine();
  dnnl::memory m(p.data, eng, data);
  dnnl::memory ms(p.scratchpad, eng, scratchpad);
  p.primitive.execute(stream, {{DNNL_ARG_SRC, m}, {DNNL_ARG_DST, m}, {DNNL_ARG_SCRATCHPAD, ms}});
}

void RunMatmul(const MatmulPrimitive& p, dnnl::stream& stream, const float* a, const float* b,
               float* c, const float* bias, void* scratchpad) {
  auto& eng = CpuEngine();
  // oneDNN takes non-const handles; it only reads a, b and bias.
  dnnl::memory ma(p.a, eng, const_cast<float*>(a));
  dnnl::memory mb(p.b, eng, const_cast<float*>(b));
  dnnl::memory mc(p.c, eng, c);
  dnnl::memory ms(p.scratchpad, eng, scratchpad);
  if (bias != nullptr) {
    dnnl::memory mbias(p.bias, eng, const_cast<float*>(bias));
    p.primitive.execute(stream, {{DNNL_ARG_SRC, ma},
                                 {DNNL_ARG_WEIGHTS, mb},
                                 {DNNL_ARG_BIAS, mbias},
                                 {DNNL_ARG_DST, mc},
                                 {DNNL_ARG_SCRATCHPAD, ms}});
  } else {
    p.primitive.execute(stream, {{DNNL_ARG_SRC, ma},
                                 {DNNL_ARG_WEIGHTS, mb},
                                 {DNNL_ARG_DST, mc},
                                 {DNNL_ARG_SCRATCHPAD, ms}});
  }
}

}  // namespace attn::internal
