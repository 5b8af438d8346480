// CudaBackend (see cuda_backend.hpp): the device, its stream and memory pool, copies, and the
// GPT kernels that map onto exec/cuda/'s fp32 launchers (embedding, LayerNorm, cuBLASLt GEMMs,
// multi-head attention, GELU, bias_dropout_add, vocab-parallel cross-entropy, AdamW). The Llama
// and blockwise-attention members are in cuda_backend_modern.cu, the MoE ones in
// cuda_backend_moe.cu.
#include "exec/cuda/cuda_backend.hpp"

#include <cublasLt.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/checks.hpp"
#include "exec/cuda/adamw.hpp"
#include "exec/cuda/attention.hpp"
#include "exec/cuda/common.cuh"
#include "exec/cuda/convert.hpp"
#include "exec/cuda/cross_entropy.hpp"
#include "exec/cuda/cuda_check.hpp"
#include "exec/cuda/dropout.hpp"
#include "exec/cuda/embedding.hpp"
#include "exec/cuda/gelu.hpp"
#include "exec/cuda/layernorm.hpp"

namespace traintwin::exec::cuda {
namespace {

constexpr DType kF32 = DType::kFloat32;

/// Throws unless `height` rows of `width` elements, `pitch` apart, lie inside `size` elements
/// (the CPU backend's rule and wording).
void check_2d(const char* what, size_t size, int64_t pitch, int64_t width, int64_t height) {
  if (width < 0 || height < 0 || pitch < width) {
    throw InvalidArgument(std::string("cuda backend ") + what + ": width " +
                          std::to_string(width) + ", height " + std::to_string(height) +
                          " and pitch " + std::to_string(pitch) +
                          " must satisfy 0 <= width <= pitch");
  }
  if (height > 0 && static_cast<int64_t>(size) < (height - 1) * pitch + width) {
    throw InvalidArgument(std::string("cuda backend ") + what + ": " + std::to_string(height) +
                          " rows of " + std::to_string(width) + " elements, " +
                          std::to_string(pitch) + " apart, leave a span of " +
                          std::to_string(size) + " elements");
  }
}

__global__ void fill_2d_kernel(float* dst, int64_t pitch, int64_t width, int64_t height,
                               float value) {
  const int64_t n = width * height;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[(i / width) * pitch + i % width] = value;
  }
}

/// Whether `p` is host memory (pageable or pinned), not device or managed memory.
bool is_host_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown to CUDA: plain host memory
  }
  return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

const float* ptr(CFSpan s) { return s.empty() ? nullptr : s.data(); }
float* ptr(FSpan s) { return s.empty() ? nullptr : s.data(); }

}  // namespace

std::string nvidia_driver_release(const std::string& text) {
  const size_t at = text.find("Kernel Module");
  if (at == std::string::npos) return "";
  const std::string line = text.substr(at, text.find('\n', at) - at);
  std::istringstream words(line);
  for (std::string w; words >> w;) {  // the first word of digits and dots, e.g. 580.159.04
    if (w.find('.') != std::string::npos &&
        w.find_first_not_of("0123456789.") == std::string::npos) {
      return w;
    }
  }
  return "";
}

void check_size(const char* who, const char* what, size_t size, int64_t expected) {
  if (expected < 0 || size != static_cast<size_t>(expected)) {
    throw InvalidArgument(std::string("cuda backend: ") + who + ": " + what + " has " +
                          std::to_string(size) + " elements, expected " +
                          std::to_string(expected));
  }
}

// ---- device, stream, pool ----------------------------------------------------------------------

CudaBackend::CudaBackend(int device) : device_(device) {
  int count = 0;
  TRAINTWIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    throw InvalidArgument("cuda backend: device " + std::to_string(device) + " requested, " +
                          std::to_string(count) + " visible (CUDA_VISIBLE_DEVICES)");
  }
  TRAINTWIN_CUDA_CHECK(cudaSetDevice(device));
  TRAINTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TRAINTWIN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device));
  // Keep freed blocks in the pool (a caching allocator, as PyTorch's) instead of returning
  // them to the driver at every synchronization.
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  TRAINTWIN_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  uint64_t zero = 0;
  TRAINTWIN_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(stream_);
#if TRAINTWIN_HAVE_CUDNN
    cudnn_attention_.reset();  // its handle is bound to the stream
#endif
    (void)cudaStreamDestroy(stream_);
  }
  for (cudaEvent_t e : marks_) (void)cudaEventDestroy(e);
}

size_t CudaBackend::mark() {
  if (marks_used_ == marks_.size()) {
    cudaEvent_t e = nullptr;
    TRAINTWIN_CUDA_CHECK(cudaEventCreate(&e));
    marks_.push_back(e);
  }
  TRAINTWIN_CUDA_CHECK(cudaEventRecord(marks_[marks_used_], stream_));
  return marks_used_++;
}

std::vector<double> CudaBackend::mark_times_s() {
  std::vector<double> out(marks_used_, 0.0);
  if (marks_used_ == 0) return out;
  TRAINTWIN_CUDA_CHECK(cudaEventSynchronize(marks_[marks_used_ - 1]));
  for (size_t i = 1; i < marks_used_; ++i) {
    float ms = 0;
    TRAINTWIN_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[0], marks_[i]));
    out[i] = static_cast<double>(ms) * 1e-3;
  }
  return out;
}

void CudaBackend::synchronize() { TRAINTWIN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

double CudaBackend::time_us(const std::function<void()>& work) {
  cudaEvent_t start = nullptr, stop = nullptr;
  TRAINTWIN_CUDA_CHECK(cudaEventCreate(&start));
  TRAINTWIN_CUDA_CHECK(cudaEventCreate(&stop));
  float ms = 0;
  try {
    TRAINTWIN_CUDA_CHECK(cudaEventRecord(start, stream_));
    work();
    TRAINTWIN_CUDA_CHECK(cudaEventRecord(stop, stream_));
    TRAINTWIN_CUDA_CHECK(cudaEventSynchronize(stop));
    TRAINTWIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  } catch (...) {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    throw;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return static_cast<double>(ms) * 1e3;
}

int64_t CudaBackend::cache_bytes() const {
  int bytes = 0;
  TRAINTWIN_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device_));
  return bytes;
}

void CudaBackend::set_float32_matmul_precision(Float32MatmulPrecision p) {
  cublas_.set_float32_matmul_precision(p);
}

CudaDeviceInfo CudaBackend::device_info() const {
  CudaDeviceInfo info;
  info.device = device_;
  cudaDeviceProp prop{};
  TRAINTWIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.compute_capability = prop.major * 10 + prop.minor;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.l2_bytes = prop.l2CacheSize;
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device_) == cudaSuccess) {
    info.sm_clock_mhz = khz / 1000;
  }
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device_) == cudaSuccess) {
    info.memory_clock_mhz = khz / 1000;
  }
  (void)cudaGetLastError();
  TRAINTWIN_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  if (std::ifstream proc("/proc/driver/nvidia/version"); proc) {
    std::stringstream text;
    text << proc.rdbuf();
    info.driver_release = nvidia_driver_release(text.str());
  }
  TRAINTWIN_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  info.cublas_version = static_cast<int>(cublasLtGetVersion());
#if TRAINTWIN_HAVE_CUDNN
  info.cudnn_version = static_cast<int>(CudnnAttention::version());
#endif
  return info;
}

int64_t CudaBackend::pool_reserved_bytes() const {
  uint64_t v = 0;
  TRAINTWIN_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &v));
  return static_cast<int64_t>(v);
}

int64_t CudaBackend::pool_peak_used_bytes() const {
  uint64_t v = 0;
  TRAINTWIN_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &v));
  return static_cast<int64_t>(v);
}

void* CudaBackend::allocate_zeroed(size_t bytes) {
  void* p = allocate_uninitialized(bytes);
  if (p != nullptr) TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return p;
}

void* CudaBackend::allocate_uninitialized(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t status = cudaMallocAsync(&p, bytes, pool_, stream_);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("cuda backend: out of device memory allocating " + std::to_string(bytes) +
                " bytes (" + cudaGetErrorString(status) + "; pool holds " +
                std::to_string(pool_reserved_bytes()) + " bytes)");
  }
  return p;
}

void CudaBackend::deallocate(void* p, size_t /*bytes*/) noexcept {
  if (p != nullptr) (void)cudaFreeAsync(p, stream_);
}

void CudaBackend::empty_cache() {
  synchronize();
  TRAINTWIN_CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
}

CudaBackend::Scratch::Scratch(CudaBackend& backend, size_t bytes)
    : backend_(backend), bytes_(bytes) {
  if (bytes > 0) {
    TRAINTWIN_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, backend.pool_, backend.stream_));
  }
}

CudaBackend::Scratch::~Scratch() {
  if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, backend_.stream_);
}

CudaBackend::Scratch CudaBackend::upload_scratch(const void* host, size_t bytes) {
  Scratch s(*this, bytes);
  if (bytes > 0) {
    TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(s.get(), host, bytes, cudaMemcpyHostToDevice, stream_));
  }
  return s;
}

// ---- copies ------------------------------------------------------------------------------------

void CudaBackend::copy(FSpan dst, CFSpan src) {
  cpu::require_same("cuda backend copy", dst.size(), src.size(), "dst and src");
  if (dst.empty() || dst.data() == src.data()) return;
  // Host to host (the communicator of one rank copying host-side counts): a plain copy, done
  // when copy() returns, as the CPU backend's.
  if (is_host_memory(dst.data()) && is_host_memory(src.data())) {
    std::memcpy(dst.data(), src.data(), dst.size() * sizeof(float));
    return;
  }
  TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.size() * sizeof(float),
                                       cudaMemcpyDefault, stream_));
}

void CudaBackend::copy_2d(FSpan dst, int64_t dst_pitch, CFSpan src, int64_t src_pitch,
                          int64_t width, int64_t height) {
  check_2d("copy_2d dst", dst.size(), dst_pitch, width, height);
  check_2d("copy_2d src", src.size(), src_pitch, width, height);
  if (width == 0 || height == 0) return;
  TRAINTWIN_CUDA_CHECK(cudaMemcpy2DAsync(
      dst.data(), static_cast<size_t>(dst_pitch) * sizeof(float), src.data(),
      static_cast<size_t>(src_pitch) * sizeof(float), static_cast<size_t>(width) * sizeof(float),
      static_cast<size_t>(height), cudaMemcpyDefault, stream_));
}

void CudaBackend::fill_2d(FSpan dst, int64_t pitch, int64_t width, int64_t height, float value) {
  check_2d("fill_2d", dst.size(), pitch, width, height);
  if (width == 0 || height == 0) return;
  if (value == 0.0f && pitch == width) {
    TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0,
                                         static_cast<size_t>(width * height) * sizeof(float),
                                         stream_));
    return;
  }
  fill_2d_kernel<<<detail::grid_for(width * height), detail::kBlock, 0, stream_>>>(
      dst.data(), pitch, width, height, value);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void CudaBackend::upload(std::span<int32_t> device, std::span<const int32_t> host) {
  cpu::require_same("cuda backend upload", device.size(), host.size(), "device and host");
  if (host.empty()) return;
  TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(device.data(), host.data(), host.size_bytes(),
                                       cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::upload(FSpan device, CFSpan host) {
  cpu::require_same("cuda backend upload", device.size(), host.size(), "device and host");
  if (host.empty()) return;
  TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(device.data(), host.data(), host.size_bytes(),
                                       cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download(std::span<float> host, CFSpan device) {
  cpu::require_same("cuda backend download", host.size(), device.size(), "host and device");
  if (host.empty()) return;
  TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(host.data(), device.data(), host.size_bytes(),
                                       cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

// ---- embedding ---------------------------------------------------------------------------------

void CudaBackend::vocab_parallel_embedding_forward(FSpan out, CISpan tokens, CFSpan wte_local,
                                                   int64_t batch, int64_t seq, int64_t channels,
                                                   int64_t vocab_start, int64_t vocab_local,
                                                   int64_t vocab_total) {
  const char* who = "vocab_parallel_embedding_forward";
  check_size(who, "out", out.size(), batch * seq * channels);
  check_size(who, "tokens", tokens.size(), batch * seq);
  check_size(who, "wte_local", wte_local.size(), vocab_local * channels);
  cuda::vocab_parallel_embedding_forward(kF32, out.data(), tokens.data(), wte_local.data(), batch,
                                         seq, channels, vocab_start, vocab_local, vocab_total,
                                         stream_);
}

void CudaBackend::vocab_parallel_embedding_backward(FSpan dwte_local, CFSpan dout, CISpan tokens,
                                                    int64_t batch, int64_t seq,
                                                    int64_t channels, int64_t vocab_start,
                                                    int64_t vocab_local, int64_t vocab_total) {
  const char* who = "vocab_parallel_embedding_backward";
  check_size(who, "dwte_local", dwte_local.size(), vocab_local * channels);
  check_size(who, "dout", dout.size(), batch * seq * channels);
  check_size(who, "tokens", tokens.size(), batch * seq);
  cuda::vocab_parallel_embedding_backward(kF32, dwte_local.data(), dout.data(), tokens.data(),
                                          batch, seq, channels, vocab_start, vocab_local,
                                          vocab_total, stream_);
}

void CudaBackend::position_embedding_forward(FSpan out, CFSpan wpe, int64_t batch,
                                             int64_t seq_local, int64_t channels,
                                             int64_t seq_offset) {
  const char* who = "position_embedding_forward";
  check_size(who, "out", out.size(), batch * seq_local * channels);
  if (channels < 1 || wpe.size() % static_cast<size_t>(channels) != 0) {
    throw InvalidArgument(std::string("cuda backend: ") + who + ": wpe has " +
                          std::to_string(wpe.size()) + " elements, not rows of " +
                          std::to_string(channels));
  }
  cuda::position_embedding_forward(kF32, out.data(), wpe.data(), batch, seq_local, channels,
                                   seq_offset, static_cast<int64_t>(wpe.size()) / channels,
                                   stream_);
}

void CudaBackend::position_embedding_backward(FSpan dwpe, CFSpan dout, int64_t batch,
                                              int64_t seq_local, int64_t channels,
                                              int64_t seq_offset) {
  const char* who = "position_embedding_backward";
  check_size(who, "dout", dout.size(), batch * seq_local * channels);
  if (channels < 1 || dwpe.size() % static_cast<size_t>(channels) != 0) {
    throw InvalidArgument(std::string("cuda backend: ") + who + ": dwpe has " +
                          std::to_string(dwpe.size()) + " elements, not rows of " +
                          std::to_string(channels));
  }
  cuda::position_embedding_backward(kF32, dwpe.data(), dout.data(), batch, seq_local, channels,
                                    seq_offset, static_cast<int64_t>(dwpe.size()) / channels,
                                    stream_);
}

// ---- LayerNorm ---------------------------------------------------------------------------------

void CudaBackend::layernorm_forward(FSpan out, FSpan mean, FSpan rstd, CFSpan inp, CFSpan weight,
                                    CFSpan bias, int64_t batch, int64_t seq, int64_t channels) {
  const char* who = "layernorm_forward";
  check_size(who, "out", out.size(), batch * seq * channels);
  check_size(who, "inp", inp.size(), batch * seq * channels);
  check_size(who, "mean", mean.size(), batch * seq);
  check_size(who, "rstd", rstd.size(), batch * seq);
  check_size(who, "weight", weight.size(), channels);
  check_size(who, "bias", bias.size(), channels);
  cuda::layernorm_forward(kF32, out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                          bias.data(), batch, seq, channels, stream_);
}

void CudaBackend::layernorm_backward(FSpan dinp, FSpan dweight, FSpan dbias, CFSpan dout,
                                     CFSpan inp, CFSpan weight, CFSpan mean, CFSpan rstd,
                                     int64_t batch, int64_t seq, int64_t channels) {
  const char* who = "layernorm_backward";
  check_size(who, "dinp", dinp.size(), batch * seq * channels);
  check_size(who, "dout", dout.size(), batch * seq * channels);
  check_size(who, "inp", inp.size(), batch * seq * channels);
  check_size(who, "dweight", dweight.size(), channels);
  check_size(who, "dbias", dbias.size(), channels);
  check_size(who, "weight", weight.size(), channels);
  check_size(who, "mean", mean.size(), batch * seq);
  check_size(who, "rstd", rstd.size(), batch * seq);
  cuda::layernorm_backward(kF32, dinp.data(), dweight.data(), dbias.data(), dout.data(),
                           inp.data(), weight.data(), mean.data(), rstd.data(), batch, seq,
                           channels, stream_);
}

// ---- GEMMs -------------------------------------------------------------------------------------

void CudaBackend::matmul_forward(FSpan out, CFSpan inp, CFSpan weight, CFSpan bias, int64_t batch,
                                 int64_t seq, int64_t channels, int64_t out_channels) {
  const char* who = "matmul_forward";
  check_size(who, "out", out.size(), batch * seq * out_channels);
  check_size(who, "inp", inp.size(), batch * seq * channels);
  check_size(who, "weight", weight.size(), out_channels * channels);
  if (!bias.empty()) check_size(who, "bias", bias.size(), out_channels);
  cuda::matmul_forward(cublas_, kF32, out.data(), inp.data(), weight.data(), ptr(bias),
                       batch * seq, channels, out_channels, stream_);
}

void CudaBackend::matmul_backward_data(FSpan dinp, CFSpan dout, CFSpan weight, int64_t batch,
                                       int64_t seq, int64_t channels, int64_t out_channels) {
  const char* who = "matmul_backward_data";
  check_size(who, "dinp", dinp.size(), batch * seq * channels);
  check_size(who, "dout", dout.size(), batch * seq * out_channels);
  check_size(who, "weight", weight.size(), out_channels * channels);
  cuda::matmul_backward_data(cublas_, kF32, dinp.data(), dout.data(), weight.data(), batch * seq,
                             channels, out_channels, /*accumulate=*/true, stream_);
}

void CudaBackend::matmul_backward_weight(FSpan dweight, FSpan dbias, CFSpan dout, CFSpan inp,
                                         int64_t batch, int64_t seq, int64_t channels,
                                         int64_t out_channels) {
  const char* who = "matmul_backward_weight";
  check_size(who, "dweight", dweight.size(), out_channels * channels);
  if (!dbias.empty()) check_size(who, "dbias", dbias.size(), out_channels);
  check_size(who, "dout", dout.size(), batch * seq * out_channels);
  check_size(who, "inp", inp.size(), batch * seq * channels);
  cuda::matmul_backward_weight(cublas_, kF32, dweight.data(), ptr(dbias), dout.data(), inp.data(),
                               batch * seq, channels, out_channels, stream_);
}

// ---- bf16 linear layers ----------------------------------------------------------------------

void CudaBackend::convert_to_bf16(BSpan dst, CFSpan src) {
  check_size("convert_to_bf16", "dst", dst.size(), static_cast<int64_t>(src.size()));
  if (src.empty()) return;
  cuda::convert(DType::kBFloat16, dst.data(), kF32, src.data(), static_cast<int64_t>(src.size()),
                stream_);
}

void CudaBackend::convert_from_bf16(FSpan dst, CBSpan src) {
  check_size("convert_from_bf16", "dst", dst.size(), static_cast<int64_t>(src.size()));
  if (src.empty()) return;
  cuda::convert(kF32, dst.data(), DType::kBFloat16, src.data(), static_cast<int64_t>(src.size()),
                stream_);
}

void CudaBackend::accumulate_from_bf16(FSpan dst, CBSpan src) {
  check_size("accumulate_from_bf16", "dst", dst.size(), static_cast<int64_t>(src.size()));
  if (src.empty()) return;
  cuda::accumulate_widened_bf16(dst.data(), src.data(), static_cast<int64_t>(src.size()), stream_);
}

void CudaBackend::matmul_forward_bf16(BSpan out, CBSpan inp, CBSpan weight, CBSpan bias,
                                      int64_t batch, int64_t seq, int64_t channels,
                                      int64_t out_channels) {
  const char* who = "matmul_forward_bf16";
  check_size(who, "out", out.size(), batch * seq * out_channels);
  check_size(who, "inp", inp.size(), batch * seq * channels);
  check_size(who, "weight", weight.size(), out_channels * channels);
  if (!bias.empty()) check_size(who, "bias", bias.size(), out_channels);
  cuda::matmul_forward(cublas_, DType::kBFloat16, out.data(), inp.data(), weight.data(),
                       bias.empty() ? nullptr : bias.data(), batch * seq, channels, out_channels,
                       stream_);
}

void CudaBackend::matmul_backward_data_bf16(BSpan dinp, CBSpan dout, CBSpan weight,
                                            int64_t batch, int64_t seq, int64_t channels,
                                            int64_t out_channels) {
  const char* who = "matmul_backward_data_bf16";
  check_size(who, "dinp", dinp.size(), batch * seq * channels);
  check_size(who, "dout", dout.size(), batch * seq * out_channels);
  check_size(who, "weight", weight.size(), out_channels * channels);
  cuda::matmul_backward_data(cublas_, DType::kBFloat16, dinp.data(), dout.data(), weight.data(),
                             batch * seq, channels, out_channels, /*accumulate=*/false, stream_);
}

void CudaBackend::matmul_backward_weight_bf16(FSpan dweight, FSpan dbias, CBSpan dout,
                                              CBSpan inp, int64_t batch, int64_t seq,
                                              int64_t channels, int64_t out_channels) {
  const char* who = "matmul_backward_weight_bf16";
  check_size(who, "dweight", dweight.size(), out_channels * channels);
  if (!dbias.empty()) check_size(who, "dbias", dbias.size(), out_channels);
  check_size(who, "dout", dout.size(), batch * seq * out_channels);
  check_size(who, "inp", inp.size(), batch * seq * channels);
  cuda::matmul_backward_weight(cublas_, DType::kBFloat16, dweight.data(), ptr(dbias), dout.data(),
                               inp.data(), batch * seq, channels, out_channels, stream_);
}

// ---- FP8 GEMMs ---------------------------------------------------------------------------------

bool CudaBackend::has_fp8_arithmetic() const {
  int major = 0, minor = 0;
  TRAINTWIN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
  TRAINTWIN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
  return major * 10 + minor >= 89;
}

void CudaBackend::quantize_fp8(F8Span dst, CFSpan src, cpu::Fp8Kind kind, float scale) {
  check_size("quantize_fp8", "dst", dst.size(), static_cast<int64_t>(src.size()));
  if (src.empty()) return;
  cuda::quantize_fp8(kind, dst.data(), src.data(), static_cast<int64_t>(src.size()), scale,
                     stream_);
}

void CudaBackend::fp8_gemm_nt(BSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b,
                              cpu::Fp8Kind b_kind, float alpha, int64_t m, int64_t n, int64_t k,
                              bool fast_accumulation) {
  const char* who = "fp8_gemm_nt";
  check_size(who, "out", out.size(), m * n);
  check_size(who, "a", a.size(), m * k);
  check_size(who, "b", b.size(), n * k);
  cuda::fp8_matmul_nt(cublas_, a_kind, a.data(), b_kind, b.data(), DType::kBFloat16, out.data(),
                      alpha, 0.0f, m, n, k, fast_accumulation, stream_);
}

void CudaBackend::fp8_gemm_nt_accumulate(FSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b,
                                         cpu::Fp8Kind b_kind, float alpha, int64_t m, int64_t n,
                                         int64_t k, bool fast_accumulation) {
  const char* who = "fp8_gemm_nt_accumulate";
  check_size(who, "out", out.size(), m * n);
  check_size(who, "a", a.size(), m * k);
  check_size(who, "b", b.size(), n * k);
  cuda::fp8_matmul_nt(cublas_, a_kind, a.data(), b_kind, b.data(), kF32, out.data(), alpha, 1.0f,
                      m, n, k, fast_accumulation, stream_);
}

// ---- multi-head attention ----------------------------------------------------------------------

void CudaBackend::attention_forward(FSpan out, FSpan preatt, FSpan att, CFSpan inp, int64_t batch,
                                    int64_t seq, int64_t channels, int64_t heads,
                                    const cpu::AttentionProbabilityDropout* dropout) {
  const char* who = "attention_forward";
  check_size(who, "out", out.size(), batch * seq * channels);
  check_size(who, "inp", inp.size(), batch * seq * 3 * channels);
  check_size(who, "preatt", preatt.size(), batch * heads * seq * seq);
  check_size(who, "att", att.size(), batch * heads * seq * seq);
  const size_t ws = attention_workspace_bytes(kF32, batch, seq, channels, heads);
  {
    Scratch workspace(*this, ws);
    cuda::attention_forward(cublas_, kF32, out.data(), preatt.data(), att.data(), inp.data(),
                            workspace.get(), ws, batch, seq, channels, heads, stream_);
  }
  if (dropout != nullptr && dropout->params.p > 0) {
    // The values weighted by dropout(att) while att itself is saved undropped: grouped-query
    // attention with one K/V head per query head is this layer, with the dropout inside.
    gqa_attention_forward(out, att, inp, batch, seq, heads, heads, channels / heads, dropout);
  }
}

void CudaBackend::attention_backward(FSpan dinp, CFSpan dout, CFSpan inp, CFSpan att,
                                     int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                                     const cpu::AttentionProbabilityDropout* dropout) {
  const char* who = "attention_backward";
  check_size(who, "dinp", dinp.size(), batch * seq * 3 * channels);
  check_size(who, "dout", dout.size(), batch * seq * channels);
  check_size(who, "inp", inp.size(), batch * seq * 3 * channels);
  check_size(who, "att", att.size(), batch * heads * seq * seq);
  if (dropout != nullptr && dropout->params.p > 0) {
    gqa_attention_backward(dinp, dout, inp, att, batch, seq, heads, heads, channels / heads,
                           dropout);
    return;
  }
  const size_t ws = attention_workspace_bytes(kF32, batch, seq, channels, heads);
  Scratch workspace(*this, ws);
  cuda::attention_backward(cublas_, kF32, dinp.data(), dout.data(), inp.data(), att.data(),
                           workspace.get(), ws, batch, seq, channels, heads, stream_);
}

// ---- elementwise -------------------------------------------------------------------------------

void CudaBackend::gelu_forward(FSpan out, CFSpan inp) {
  cpu::require_same("cuda backend gelu_forward", out.size(), inp.size(), "out and inp");
  if (out.empty()) return;
  cuda::gelu_forward(kF32, out.data(), inp.data(), static_cast<int64_t>(out.size()), stream_);
}

void CudaBackend::gelu_backward(FSpan dinp, CFSpan inp, CFSpan dout) {
  cpu::require_same("cuda backend gelu_backward", dinp.size(), inp.size(), "dinp and inp");
  cpu::require_same("cuda backend gelu_backward", dinp.size(), dout.size(), "dinp and dout");
  if (dinp.empty()) return;
  cuda::gelu_backward(kF32, dinp.data(), inp.data(), dout.data(),
                      static_cast<int64_t>(dinp.size()), stream_);
}

void CudaBackend::bias_dropout_add_forward(FSpan out, CFSpan inp, CFSpan bias, CFSpan residual,
                                           const cpu::DropoutParams& params,
                                           const cpu::HiddenBlock& block) {
  const char* who = "bias_dropout_add_forward";
  const int64_t n = block.batch * block.seq_local * block.channels;
  check_size(who, "out", out.size(), n);
  check_size(who, "inp", inp.size(), n);
  if (!bias.empty()) check_size(who, "bias", bias.size(), block.channels);
  if (!residual.empty()) check_size(who, "residual", residual.size(), n);
  cuda::bias_dropout_add_forward(kF32, out.data(), inp.data(), ptr(bias), ptr(residual), params,
                                 block, stream_);
}

void CudaBackend::bias_dropout_add_backward(FSpan dinp, FSpan dbias, FSpan dresidual, CFSpan dout,
                                            const cpu::DropoutParams& params,
                                            const cpu::HiddenBlock& block) {
  const char* who = "bias_dropout_add_backward";
  const int64_t n = block.batch * block.seq_local * block.channels;
  check_size(who, "dinp", dinp.size(), n);
  check_size(who, "dout", dout.size(), n);
  if (!dbias.empty()) check_size(who, "dbias", dbias.size(), block.channels);
  if (!dresidual.empty()) check_size(who, "dresidual", dresidual.size(), n);
  cuda::bias_dropout_add_backward(kF32, dinp.data(), ptr(dbias), ptr(dresidual), dout.data(),
                                  params, block, stream_);
}

// ---- vocab-parallel cross-entropy --------------------------------------------------------------

void CudaBackend::vocab_parallel_logits_max(FSpan logits_max_local, CFSpan logits_local,
                                            int64_t batch, int64_t seq, int64_t vocab_local) {
  const char* who = "vocab_parallel_logits_max";
  check_size(who, "logits_max_local", logits_max_local.size(), batch * seq);
  check_size(who, "logits_local", logits_local.size(), batch * seq * vocab_local);
  cuda::vocab_parallel_logits_max(kF32, logits_max_local.data(), logits_local.data(), batch * seq,
                                  vocab_local, stream_);
}

void CudaBackend::vocab_parallel_sum_exp(FSpan sum_exp_local, FSpan target_logit_local,
                                         CFSpan logits_local, CFSpan logits_max, CISpan targets,
                                         int64_t batch, int64_t seq, int64_t vocab_start,
                                         int64_t vocab_local, int64_t vocab_total) {
  const char* who = "vocab_parallel_sum_exp";
  check_size(who, "sum_exp_local", sum_exp_local.size(), batch * seq);
  check_size(who, "target_logit_local", target_logit_local.size(), batch * seq);
  check_size(who, "logits_local", logits_local.size(), batch * seq * vocab_local);
  check_size(who, "logits_max", logits_max.size(), batch * seq);
  check_size(who, "targets", targets.size(), batch * seq);
  cuda::vocab_parallel_sum_exp(kF32, sum_exp_local.data(), target_logit_local.data(),
                               logits_local.data(), logits_max.data(), targets.data(),
                               batch * seq, vocab_start, vocab_local, vocab_total, stream_);
}

void CudaBackend::vocab_parallel_cross_entropy_loss(FSpan losses, CFSpan sum_exp,
                                                    CFSpan logits_max, CFSpan target_logit,
                                                    int64_t batch, int64_t seq) {
  const char* who = "vocab_parallel_cross_entropy_loss";
  check_size(who, "losses", losses.size(), batch * seq);
  check_size(who, "sum_exp", sum_exp.size(), batch * seq);
  check_size(who, "logits_max", logits_max.size(), batch * seq);
  check_size(who, "target_logit", target_logit.size(), batch * seq);
  cuda::vocab_parallel_cross_entropy_loss(losses.data(), sum_exp.data(), logits_max.data(),
                                          target_logit.data(), batch * seq, stream_);
}

void CudaBackend::vocab_parallel_cross_entropy_backward(FSpan dlogits_local, CFSpan dlosses,
                                                        CFSpan logits_local, CFSpan logits_max,
                                                        CFSpan sum_exp, CISpan targets,
                                                        int64_t batch, int64_t seq,
                                                        int64_t vocab_start, int64_t vocab_local,
                                                        int64_t vocab_total) {
  const char* who = "vocab_parallel_cross_entropy_backward";
  check_size(who, "dlogits_local", dlogits_local.size(), batch * seq * vocab_local);
  check_size(who, "dlosses", dlosses.size(), batch * seq);
  check_size(who, "logits_local", logits_local.size(), batch * seq * vocab_local);
  check_size(who, "logits_max", logits_max.size(), batch * seq);
  check_size(who, "sum_exp", sum_exp.size(), batch * seq);
  check_size(who, "targets", targets.size(), batch * seq);
  cuda::vocab_parallel_cross_entropy_backward(kF32, dlogits_local.data(), dlosses.data(),
                                              logits_local.data(), logits_max.data(),
                                              sum_exp.data(), targets.data(), batch * seq,
                                              vocab_start, vocab_local, vocab_total, stream_);
}

// ---- optimizer ---------------------------------------------------------------------------------

double CudaBackend::sum_of_squares(CFSpan values) {
  if (values.empty()) return 0.0;
  Scratch result(*this, sizeof(double));
  TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(result.get(), 0, sizeof(double), stream_));
  cuda::sum_of_squares(kF32, values.data(), static_cast<int64_t>(values.size()),
                       result.as<double>(), stream_);
  double host = 0;
  TRAINTWIN_CUDA_CHECK(
      cudaMemcpyAsync(&host, result.get(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return host;
}

double CudaBackend::total_sum_of_squares(std::span<const CFSpan> pieces) {
  Scratch result(*this, sizeof(double));
  TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(result.get(), 0, sizeof(double), stream_));
  const float* start = nullptr;
  size_t length = 0;
  auto flush = [&] {
    if (length > 0) {
      cuda::sum_of_squares(kF32, start, static_cast<int64_t>(length), result.as<double>(),
                           stream_);
    }
  };
  for (const CFSpan& p : pieces) {
    if (p.empty()) continue;
    if (start != nullptr && start + length == p.data()) {
      length += p.size();
    } else {
      flush();
      start = p.data();
      length = p.size();
    }
  }
  flush();
  double host = 0;
  TRAINTWIN_CUDA_CHECK(
      cudaMemcpyAsync(&host, result.get(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return host;
}

void CudaBackend::scale_in_place(FSpan values, double factor) {
  if (values.empty()) return;
  cuda::scale_in_place(values.data(), static_cast<int64_t>(values.size()), factor, stream_);
}

void CudaBackend::adamw_step(FSpan params, CFSpan grads, FSpan exp_avg, FSpan exp_avg_sq,
                             const cpu::AdamWParams& hyper, double lr, int64_t step) {
  cpu::require_same("cuda backend adamw_step", params.size(), grads.size(), "params and grads");
  cpu::require_same("cuda backend adamw_step", params.size(), exp_avg.size(),
                    "params and exp_avg");
  cpu::require_same("cuda backend adamw_step", params.size(), exp_avg_sq.size(),
                    "params and exp_avg_sq");
  if (params.empty()) return;
  cuda::adamw_step(params.data(), grads.data(), exp_avg.data(), exp_avg_sq.data(),
                   static_cast<int64_t>(params.size()), hyper, lr, step, nullptr, kF32, stream_);
}

}  // namespace traintwin::exec::cuda
