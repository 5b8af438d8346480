// cuDNN's fused causal attention: the backend-API graphs of exec/cuda/cudnn_attention.hpp, their
// plans and their execution. Plain C++ (cudnn.h, cuda_runtime_api.h).
#include "exec/cuda/cudnn_attention.hpp"

#include <cudnn.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/cuda_check.hpp"

namespace traintwin::exec::cuda {
namespace {

std::string status_text(cudnnStatus_t s) {
  std::string text = cudnnGetErrorString(s);
  char detail[2048] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  if (detail[0] != '\0') text += std::string(" (") + detail + ")";
  return text;
}

void check(cudnnStatus_t s, const char* call) {
  if (s != CUDNN_STATUS_SUCCESS) {
    throw CudnnError(std::string("cuDNN: ") + call + " failed: " + status_text(s));
  }
}
#define TT_CUDNN(call) check((call), #call)

/// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    TT_CUDNN(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~Desc() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
            const void* values) {
    TT_CUDNN(cudnnBackendSetAttribute(d_, name, type, count, values));
    return *this;
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t p = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
  }
  Desc& set_i64(cudnnBackendAttributeName_t name, int64_t v) {
    return set(name, CUDNN_TYPE_INT64, 1, &v);
  }
  Desc& set_type(cudnnBackendAttributeName_t name, cudnnDataType_t t) {
    return set(name, CUDNN_TYPE_DATA_TYPE, 1, &t);
  }
  /// cudnnBackendFinalize; the status is returned (engine configurations may refuse).
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }
  void finalize(const char* what) {
    const cudnnStatus_t s = try_finalize();
    if (s != CUDNN_STATUS_SUCCESS) {
      throw CudnnError(std::string("cuDNN: finalizing ") + what + " failed: " + status_text(s));
    }
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::vector<int64_t>;

/// A tensor of a graph: its descriptor and unique id.
struct Tensor {
  const Desc* desc = nullptr;
  int64_t uid = 0;
};

/// The descriptors of one operation graph, kept alive as long as its plan.
class Graph {
 public:
  Tensor tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides, bool is_virtual,
                bool by_value = false) {
    auto d = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t uid = next_uid_++;
    const bool virt = is_virtual;
    d->set_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()),
             dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()),
             strides.data())
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (by_value) {
      const bool yes = true;
      d->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    d->finalize("a tensor descriptor");
    descs_.push_back(std::move(d));
    return Tensor{descs_.back().get(), uid};
  }
  /// A virtual fp32 tensor of `dims` in row-major order.
  Tensor virt(const Dims& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    Dims strides(dims.size(), 1);
    for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
    return tensor(type, dims, strides, true);
  }
  /// A by-value fp32 scalar (its value is passed in the variant pack).
  Tensor scalar() { return tensor(CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

  void pointwise(cudnnPointwiseMode_t mode, Tensor x, const Tensor* b, const Tensor* t, Tensor y,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    auto pw = std::make_unique<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set_type(CUDNN_ATTR_POINTWISE_MATH_PREC, compute);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) pw->set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
    pw->finalize("a pointwise descriptor");
    auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw)
        .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *x.desc);
    if (b != nullptr) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b->desc);
    if (t != nullptr) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t->desc);
    op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, *y.desc);
    const float one = 1.0f;
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    op->finalize("a pointwise operation");
    descs_.push_back(std::move(pw));
    add_op(std::move(op));
  }
  void unary(cudnnPointwiseMode_t mode, Tensor x, Tensor y) {
    pointwise(mode, x, nullptr, nullptr, y);
  }
  void binary(cudnnPointwiseMode_t mode, Tensor x, Tensor b, Tensor y) {
    pointwise(mode, x, &b, nullptr, y);
  }
  void reduction(cudnnReduceTensorOp_t reduce, Tensor x, Tensor y) {
    auto r = std::make_unique<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
        .set_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
    r->finalize("a reduction descriptor");
    auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, *x.desc)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, *y.desc)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *r);
    op->finalize("a reduction operation");
    descs_.push_back(std::move(r));
    add_op(std::move(op));
  }
  void matmul(Tensor a, Tensor b, Tensor c) {
    auto m = std::make_unique<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    m->set_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    m->finalize("a matmul descriptor");
    auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *a.desc)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *b.desc)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, *c.desc)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, *m);
    op->finalize("a matmul operation");
    descs_.push_back(std::move(m));
    add_op(std::move(op));
  }
  void reshape(Tensor x, Tensor y) {
    auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, *x.desc)
        .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, *y.desc);
    op->finalize("a reshape operation");
    add_op(std::move(op));
  }

  /// The operation graph of every operation added, finalized.
  const Desc& finalize(const char* what) {
    graph_ = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> ops;
    for (const Desc* op : ops_) ops.push_back(op->get());
    graph_->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                static_cast<int64_t>(ops.size()), ops.data());
    graph_->finalize(what);
    return *graph_;
  }

 private:
  void add_op(std::unique_ptr<Desc> op) {
    ops_.push_back(op.get());
    descs_.push_back(std::move(op));
  }

  int64_t next_uid_ = 1;
  std::vector<std::unique_ptr<Desc>> descs_;
  std::vector<const Desc*> ops_;
  std::unique_ptr<Desc> graph_;
};

/// The causal mask of cudnn-frontend's sliding_window_mask with right bound 0, top-left
/// diagonal (diagonal_band_mask: row = GEN_INDEX axis 2, column = GEN_INDEX axis 3, keep
/// row >= column, else -inf): returns the masked scores.
Tensor causal_mask(Graph& g, Tensor scores, const Dims& dims, Tensor neg_inf) {
  const Tensor row = g.virt(dims, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
  const Tensor col = g.virt(dims, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
  const Tensor keep = g.virt(dims, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, nullptr, keep, CUDNN_DATA_BOOLEAN);
  const Tensor masked = g.virt(dims);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, &neg_inf, &keep, masked);
  return masked;
}

}  // namespace

/// A shape's forward and backward graphs, their plans and the uids of their device tensors.
struct CudnnAttention::Plans {
  Graph forward_graph;
  Graph backward_graph;
  std::unique_ptr<Desc> forward_plan;
  std::unique_ptr<Desc> backward_plan;
  CudnnAttentionPlanInfo info;
  // by-value scalars (their addresses go into the variant packs)
  float scale = 0.0f;
  float neg_inf = -std::numeric_limits<float>::infinity();
  float one = 1.0f;
  // forward uids
  int64_t f_q = 0, f_k = 0, f_v = 0, f_o = 0, f_stats = 0, f_scale = 0, f_neg_inf = 0;
  // backward uids
  int64_t b_q = 0, b_k = 0, b_v = 0, b_o = 0, b_do = 0, b_stats = 0, b_dq = 0, b_dk = 0,
          b_dv = 0, b_sum = 0, b_dq_accum = 0, b_scale = 0, b_neg_inf = 0, b_one = 0;
};

namespace {

/// The first engine configuration of heuristics mode A that finalizes into an execution plan
/// (CUDNN_HEUR_MODE_FALLBACK's list when mode A has none).
/// `bytes` rounded up to 256 (the alignment of each piece of the backward's scratch).
int64_t round_up_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

/// The backward's scratch after cuDNN's workspace: D [B, NH, T] fp32, then the dQ accumulator
/// [B, NH, T, D] fp32, each 256-byte aligned. Offsets are from the scratch's start.
struct BackwardScratch {
  int64_t softmax_sum_offset = 0;
  int64_t dq_accum_offset = 0;
  int64_t total_bytes = 0;
};
BackwardScratch backward_scratch(const CudnnAttentionShape& s, int64_t workspace_bytes) {
  BackwardScratch b;
  b.softmax_sum_offset = round_up_256(workspace_bytes);
  b.dq_accum_offset = b.softmax_sum_offset + round_up_256(s.batch * s.heads * s.seq * 4);
  b.total_bytes = b.dq_accum_offset + round_up_256(s.batch * s.heads * s.seq * s.head_dim * 4);
  return b;
}

std::unique_ptr<Desc> make_plan(const Desc& graph, void* device_properties, int64_t& engine,
                                int64_t& workspace_bytes, const std::string& what) {
  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (device_properties != nullptr) {
      heur.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &device_properties);
    }
    const cudnnStatus_t hs = heur.try_finalize();
    if (hs != CUDNN_STATUS_SUCCESS) {
      tried += std::string(" heuristics mode ") + std::to_string(mode) + ": " + status_text(hs) +
               ";";
      continue;
    }
    int64_t count = 0;
    TT_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    std::vector<std::unique_ptr<Desc>> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      raw.push_back(configs.back()->get());
    }
    int64_t returned = 0;
    if (count > 0) {
      TT_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                        raw.data()));
    }
    for (int64_t i = 0; i < returned; ++i) {
      auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[static_cast<size_t>(i)]);
      if (device_properties != nullptr) {
        plan->set(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                  &device_properties);
      }
      const cudnnStatus_t ps = plan->try_finalize();
      if (ps != CUDNN_STATUS_SUCCESS) {
        tried += " config " + std::to_string(i) + ": " + status_text(ps) + ";";
        continue;
      }
      TT_CUDNN(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                        CUDNN_TYPE_INT64, 1, nullptr, &workspace_bytes));
      Desc eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t eng_raw = eng.get();
      int64_t n = 0;
      TT_CUDNN(cudnnBackendGetAttribute(configs[static_cast<size_t>(i)]->get(),
                                        CUDNN_ATTR_ENGINECFG_ENGINE,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng_raw));
      TT_CUDNN(cudnnBackendGetAttribute(eng.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                        CUDNN_TYPE_INT64, 1, nullptr, &engine));
      return plan;
    }
    tried += std::string(" heuristics mode ") + std::to_string(mode) + ": " +
             std::to_string(returned) + " configurations;";
  }
  throw CudnnError("cuDNN: no engine runs " + what + ":" + tried);
}

}  // namespace

CudnnAttention::CudnnAttention(void* handle, void* device_properties, cudaStream_t stream)
    : handle_(handle), device_properties_(device_properties), stream_(stream) {}

CudnnAttention::CudnnAttention(cudaStream_t stream) : stream_(stream) {
  cudnnHandle_t h = nullptr;
  TT_CUDNN(cudnnCreate(&h));
  handle_ = h;
  try {
    TT_CUDNN(cudnnSetStream(h, stream));
    cudnnBackendDescriptor_t props = nullptr;
    TT_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &props));
    device_properties_ = props;
    // The device of the handle (setting CUDNN_ATTR_DEVICEPROP_DEVICE_ID as well is refused by
    // cuDNN 9.14-9.19 with CUDNN_STATUS_BAD_PARAM).
    TT_CUDNN(
        cudnnBackendSetAttribute(props, CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    TT_CUDNN(cudnnBackendFinalize(props));
  } catch (...) {
    if (device_properties_ != nullptr) {
      cudnnBackendDestroyDescriptor(static_cast<cudnnBackendDescriptor_t>(device_properties_));
    }
    cudnnDestroy(h);
    throw;
  }
}

std::unique_ptr<CudnnAttention> CudnnAttention::deviceless(const std::string& device_json) {
  cudnnBackendDescriptor_t props = nullptr;
  TT_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &props));
  std::unique_ptr<CudnnAttention> a(new CudnnAttention(nullptr, props, nullptr));
  TT_CUDNN(cudnnBackendSetAttribute(props, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                    CUDNN_TYPE_CHAR, static_cast<int64_t>(device_json.size()),
                                    device_json.data()));
  TT_CUDNN(cudnnBackendFinalize(props));
  return a;
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (device_properties_ != nullptr) {
    cudnnBackendDestroyDescriptor(static_cast<cudnnBackendDescriptor_t>(device_properties_));
  }
  if (handle_ != nullptr) cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
}

int64_t CudnnAttention::version() { return static_cast<int64_t>(cudnnGetVersion()); }

CudnnAttentionPlanInfo CudnnAttention::prepare(const CudnnAttentionShape& s) {
  if (s.batch < 1 || s.seq < 1 || s.heads < 1 || s.head_dim < 1) {
    throw InvalidArgument("cudnn attention: sizes must be >= 1 (B " + std::to_string(s.batch) +
                          ", T " + std::to_string(s.seq) + ", NH " + std::to_string(s.heads) +
                          ", D " + std::to_string(s.head_dim) + ")");
  }
  auto found = plans_.find(s);
  if (found != plans_.end()) return found->second->info;

  const int64_t B = s.batch, T = s.seq, H = s.heads, D = s.head_dim;
  const int64_t P = 3 * H * D;  // pitch of a QKV row
  const std::string what = "causal attention [B " + std::to_string(B) + ", NH " +
                           std::to_string(H) + ", T " + std::to_string(T) + ", D " +
                           std::to_string(D) + "] on cuDNN " + std::to_string(version());
  auto p = std::make_unique<Plans>();
  p->scale = s.scale;
  const Dims bhtd{B, H, T, D}, bhtt{B, H, T, T}, bht1{B, H, T, 1};
  const Dims rows_stride{T * P, D, P, 1};          // q, k, v (and their gradients) in the rows
  const Dims kt_dims{B, H, D, T}, kt_stride{T * P, D, 1, P};
  const Dims out_stride{T * H * D, D, H * D, 1};   // out, dout [B, T, NH D]
  const Dims stats_stride{H * T, T, 1, 1};
  const Dims tt_transposed{H * T * T, T * T, 1, T};

  {  // forward
    Graph& g = p->forward_graph;
    const Tensor q = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, rows_stride, false);
    const Tensor kt = g.tensor(CUDNN_DATA_BFLOAT16, kt_dims, kt_stride, false);
    const Tensor v = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, rows_stride, false);
    const Tensor o = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, out_stride, false);
    const Tensor stats = g.tensor(CUDNN_DATA_FLOAT, bht1, stats_stride, false);
    const Tensor scale = g.scalar();
    const Tensor neg_inf = g.scalar();
    const Tensor s_raw = g.virt(bhtt);
    g.matmul(q, kt, s_raw);
    const Tensor s_scaled = g.virt(bhtt);
    g.binary(CUDNN_POINTWISE_MUL, s_raw, scale, s_scaled);
    const Tensor s_masked = causal_mask(g, s_scaled, bhtt, neg_inf);
    const Tensor max = g.virt(bht1);
    g.reduction(CUDNN_REDUCE_TENSOR_MAX, s_masked, max);
    const Tensor centered = g.virt(bhtt);
    g.binary(CUDNN_POINTWISE_SUB, s_masked, max, centered);
    const Tensor e = g.virt(bhtt);
    g.unary(CUDNN_POINTWISE_EXP, centered, e);
    const Tensor sum = g.virt(bht1);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
    const Tensor log_sum = g.virt(bht1);
    g.unary(CUDNN_POINTWISE_LOG, sum, log_sum);
    g.binary(CUDNN_POINTWISE_ADD, max, log_sum, stats);
    const Tensor prob = g.virt(bhtt, CUDNN_DATA_BFLOAT16);  // bmm2's A in the I/O type
    g.binary(CUDNN_POINTWISE_DIV, e, sum, prob);
    g.matmul(prob, v, o);
    p->f_q = q.uid, p->f_k = kt.uid, p->f_v = v.uid, p->f_o = o.uid, p->f_stats = stats.uid;
    p->f_scale = scale.uid, p->f_neg_inf = neg_inf.uid;
    const Desc& graph = g.finalize(("the forward graph of " + what).c_str());
    p->forward_plan = make_plan(graph, device_properties_, p->info.forward_engine,
                                p->info.forward_workspace_bytes, "the forward of " + what);
  }
  {  // backward
    Graph& g = p->backward_graph;
    const Tensor q = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, rows_stride, false);
    const Tensor kt = g.tensor(CUDNN_DATA_BFLOAT16, kt_dims, kt_stride, false);
    const Tensor vt = g.tensor(CUDNN_DATA_BFLOAT16, kt_dims, kt_stride, false);
    const Tensor o = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, out_stride, false);
    const Tensor dout = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, out_stride, false);
    const Tensor stats = g.tensor(CUDNN_DATA_FLOAT, bht1, stats_stride, false);
    const Tensor dq = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, rows_stride, false);
    const Tensor dk = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, rows_stride, false);
    const Tensor dv = g.tensor(CUDNN_DATA_BFLOAT16, bhtd, rows_stride, false);
    const Tensor softmax_sum = g.tensor(CUDNN_DATA_FLOAT, bht1, stats_stride, false);
    const Tensor dq_accum =
        g.tensor(CUDNN_DATA_FLOAT, bhtd, Dims{H * T * D, T * D, D, 1}, false);
    const Tensor scale = g.scalar();
    const Tensor neg_inf = g.scalar();
    const Tensor one = g.scalar();
    // D = rowsum(dO * O)
    const Tensor do_o = g.virt(bhtd);
    g.binary(CUDNN_POINTWISE_MUL, dout, o, do_o);
    const Tensor rowsum = g.virt(bht1);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, rowsum);
    g.binary(CUDNN_POINTWISE_MUL, rowsum, one, softmax_sum);
    // P = exp(scale Q K^T - lse), masked
    const Tensor s_raw = g.virt(bhtt);
    g.matmul(q, kt, s_raw);
    const Tensor s_scaled = g.virt(bhtt);
    g.binary(CUDNN_POINTWISE_MUL, s_raw, scale, s_scaled);
    const Tensor centered = g.virt(bhtt);
    g.binary(CUDNN_POINTWISE_SUB, s_scaled, stats, centered);
    const Tensor masked = causal_mask(g, centered, bhtt, neg_inf);
    const Tensor prob = g.virt(bhtt);
    g.unary(CUDNN_POINTWISE_EXP, masked, prob);
    // dV = P^T dO
    const Tensor prob_t = g.tensor(CUDNN_DATA_BFLOAT16, Dims{B, H, T, T}, tt_transposed, true);
    g.reshape(prob, prob_t);
    g.matmul(prob_t, dout, dv);
    // dS = P (dO V^T - D) scale
    const Tensor dp = g.virt(bhtt);
    g.matmul(dout, vt, dp);
    const Tensor dp_centered = g.virt(bhtt);
    g.binary(CUDNN_POINTWISE_SUB, dp, softmax_sum, dp_centered);
    const Tensor ds_unscaled = g.virt(bhtt);
    g.binary(CUDNN_POINTWISE_MUL, dp_centered, prob, ds_unscaled);
    const Tensor ds = g.virt(bhtt);
    g.binary(CUDNN_POINTWISE_MUL, ds_unscaled, scale, ds);
    // dK = dS^T Q
    const Tensor ds_t = g.tensor(CUDNN_DATA_BFLOAT16, Dims{B, H, T, T}, tt_transposed, true);
    g.reshape(ds, ds_t);
    g.matmul(ds_t, q, dk);
    // dQ = dS K (fp32 accumulator, then rounded)
    const Tensor k = g.tensor(CUDNN_DATA_FLOAT, bhtd, rows_stride, true);
    g.reshape(kt, k);
    g.matmul(ds, k, dq_accum);
    g.unary(CUDNN_POINTWISE_IDENTITY, dq_accum, dq);
    p->b_q = q.uid, p->b_k = kt.uid, p->b_v = vt.uid, p->b_o = o.uid, p->b_do = dout.uid;
    p->b_stats = stats.uid, p->b_dq = dq.uid, p->b_dk = dk.uid, p->b_dv = dv.uid;
    p->b_sum = softmax_sum.uid, p->b_dq_accum = dq_accum.uid;
    p->b_scale = scale.uid, p->b_neg_inf = neg_inf.uid, p->b_one = one.uid;
    const Desc& graph = g.finalize(("the backward graph of " + what).c_str());
    p->backward_plan = make_plan(graph, device_properties_, p->info.backward_engine,
                                 p->info.backward_workspace_bytes, "the backward of " + what);
  }
  p->info.backward_scratch_bytes = backward_scratch(s, 0).total_bytes;  // without the workspace
  const CudnnAttentionPlanInfo info = p->info;
  plans_.emplace(s, std::move(p));
  return info;
}

void* CudnnAttention::scratch(int64_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  if (scratch_ != nullptr) {
    TRAINTWIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the last user may still run
    TRAINTWIN_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
  }
  TRAINTWIN_CUDA_CHECK(cudaMalloc(&scratch_, static_cast<size_t>(bytes)));
  scratch_bytes_ = bytes;
  return scratch_;
}

namespace {

void execute(void* handle, const Desc& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
           uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize("a variant pack");
  TT_CUDNN(cudnnBackendExecute(static_cast<cudnnHandle_t>(handle), plan.get(), pack.get()));
}

char* offset_bf16(const void* base, int64_t elements) {
  return const_cast<char*>(static_cast<const char*>(base)) + elements * 2;
}

}  // namespace

CudnnAttention::Plans& CudnnAttention::runnable(const CudnnAttentionShape& s) {
  if (handle_ == nullptr) throw CudnnError("cuDNN attention: a deviceless instance cannot run");
  prepare(s);
  return *plans_.at(s);
}

void CudnnAttention::forward(const CudnnAttentionShape& s, const void* qkv, void* out,
                             float* lse) {
  Plans& p = runnable(s);
  const int64_t hd = s.heads * s.head_dim;
  void* ws = scratch(std::max<int64_t>(p.info.forward_workspace_bytes, 1));
  execute(handle_, *p.forward_plan,
          {p.f_q, p.f_k, p.f_v, p.f_o, p.f_stats, p.f_scale, p.f_neg_inf},
          {const_cast<void*>(qkv), offset_bf16(qkv, hd), offset_bf16(qkv, 2 * hd), out, lse,
           &p.scale, &p.neg_inf},
          ws);
}

void CudnnAttention::backward(const CudnnAttentionShape& s, const void* qkv, const void* out,
                              const void* dout, const float* lse, void* dqkv) {
  Plans& p = runnable(s);
  const int64_t hd = s.heads * s.head_dim;
  const BackwardScratch layout = backward_scratch(s, p.info.backward_workspace_bytes);
  char* base = static_cast<char*>(scratch(layout.total_bytes));
  execute(handle_, *p.backward_plan,
          {p.b_q, p.b_k, p.b_v, p.b_o, p.b_do, p.b_stats, p.b_dq, p.b_dk, p.b_dv, p.b_sum,
           p.b_dq_accum, p.b_scale, p.b_neg_inf, p.b_one},
          {const_cast<void*>(qkv), offset_bf16(qkv, hd), offset_bf16(qkv, 2 * hd),
           const_cast<void*>(out), const_cast<void*>(dout), const_cast<float*>(lse), dqkv,
           offset_bf16(dqkv, hd), offset_bf16(dqkv, 2 * hd), base + layout.softmax_sum_offset,
           base + layout.dq_accum_offset, &p.scale, &p.neg_inf, &p.one},
          base);
}

}  // namespace traintwin::exec::cuda
