// The risk (E) of Eq. (T) and its gradient in one pass over X, a block of samples at a time while its
// values are in the core's L1/L2 cache: an XLA FFI handler for the CPU (posattn/theory/one_pass_kernel.py
// builds and registers it; posattn/theory/fused.py calls it). Per block of kBlock samples:
//   z_nj = <v, X_nj>,  u_ni = sum_j M_ij z_nj,  F_n = sum_i sigma(u_ni),  l_n = w_n log(1 + exp(-y_n F_n)),
//   du_ni = (dl_n / dF_n) sigma'(u_ni),  dM += du^T z,  dz_nj = sum_i M_ij du_ni,  dv += sum_nj dz_nj X_nj,
// where M is the score matrix S of Definition 3.2, times D when Eq. (T) scales by D. The sums over
// samples are returned unnormalised (loss, dM, dv), so that sums over devices add up. The three D x D
// products of a block (u, dM, dz) are small matrix products held in registers (MixRows,
// AccumulateOuter): at the paper preset's D = 36 they cost as much arithmetic as the two passes over X.
//
// Inputs X (..., n, D, d), y (..., n), w (..., n), M (..., D, D), v (..., d), float32; the leading
// (batch) dimensions of each are those of the outputs or 1 (`vmap_method="expand_dims"`), so that a
// vmapped call never broadcasts X.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Samples per block: the loss and its gradient run over a block at a time, vectorised over the
// block's samples (the D x D mix and the exponentials), while the block's X stays in L1/L2.
constexpr int64_t kBlock = 32;

// One (E) sum: samples X (n, D, d), labels y (n,), weights w (n,), the mix M (D, D) and v (d,).
struct Problem {
  const float *X, *y, *w, *M, *v;
  int64_t n, D, d;
  bool quintic;  // sigma(u) = u^5 + 0.03 u, else u^3
};

struct Sums {
  double loss;
  float* dM;  // (D, D)
  float* dv;  // (d,)
};

// W float lanes, one vector register of the target (8: AVX2; 4: SSE, NEON), loaded from and stored to
// float buffers at any alignment. The block's kBlock samples are kBlock / W of them. The helpers below
// are inlined into OnePass's instance for its W, and so compiled for its instruction set.
template <int W>
struct Lanes {
  typedef float V __attribute__((vector_size(4 * W), aligned(4), may_alias));
};
#define POSATTN_INLINE __attribute__((always_inline)) inline

POSATTN_INLINE int64_t RoundUp(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// outT_r = sum_s W_rs inT_s for the rows r < D of (D, kBlock) buffers, the block's samples along each
// row: u = M z (Wm = M) or dz = M^T du (Wm = M^T). Two rows at a time, so that each row of inT read from
// L1 feeds 2 x kBlock multiply-adds into sums held in registers.
template <int W>
POSATTN_INLINE void MixRows(const float* Wm, const float* inT, float* outT, int64_t D) {
  using V = typename Lanes<W>::V;
  constexpr int64_t kV = kBlock / W;
  const V* in = reinterpret_cast<const V*>(inT);
  V* out = reinterpret_cast<V*>(outT);
  int64_t r = 0;
  for (; r + 2 <= D; r += 2) {
    V a0[kV] = {}, a1[kV] = {};
    for (int64_t s = 0; s < D; ++s) {
      const float w0 = Wm[r * D + s], w1 = Wm[(r + 1) * D + s];
      for (int64_t q = 0; q < kV; ++q) a0[q] += w0 * in[s * kV + q], a1[q] += w1 * in[s * kV + q];
    }
    for (int64_t q = 0; q < kV; ++q) out[r * kV + q] = a0[q], out[(r + 1) * kV + q] = a1[q];
  }
  for (; r < D; ++r) {
    V a0[kV] = {};
    for (int64_t s = 0; s < D; ++s)
      for (int64_t q = 0; q < kV; ++q) a0[q] += Wm[r * D + s] * in[s * kV + q];
    for (int64_t q = 0; q < kV; ++q) out[r * kV + q] = a0[q];
  }
}

// G_ij += sum_b duT_ib z_bj over the block (the block's dM = du^T z), with G (Dr, Dc), duT (Dr, kBlock)
// and z (kBlock, Dc) padded to Dr a multiple of 4 and Dc of 2 W: tiles of 4 x 2 W of G in registers.
template <int W>
POSATTN_INLINE void AccumulateOuter(const float* duT, const float* z, float* G, int64_t Dr, int64_t Dc) {
  using V = typename Lanes<W>::V;
  for (int64_t i = 0; i < Dr; i += 4) {
    for (int64_t j = 0; j < Dc; j += 2 * W) {
      V g[4][2] = {};
      for (int64_t b = 0; b < kBlock; ++b) {
        const V* zb = reinterpret_cast<const V*>(z + b * Dc + j);
        for (int64_t r = 0; r < 4; ++r) {
          const float du = duT[(i + r) * kBlock + b];
          g[r][0] += du * zb[0], g[r][1] += du * zb[1];
        }
      }
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t h = 0; h < 2; ++h) reinterpret_cast<V*>(G + (i + r) * Dc + j)[h] += g[r][h];
    }
  }
}

template <int W>
POSATTN_INLINE void OnePassW(const Problem& p, Sums* out) {
  const float *X = p.X, *y = p.y, *w = p.w, *M = p.M, *v = p.v;
  const int64_t n = p.n, D = p.D, d = p.d;
  const bool quintic = p.quintic;
  // The padding (rows D..Dr, columns D..Dc) stays 0, and the sums it gathers are never read.
  const int64_t Dr = RoundUp(D, 4), Dc = RoundUp(D, 2 * W);
  std::vector<float> zT(Dr * kBlock), duT(Dr * kBlock), dzT(Dr * kBlock);  // the block's samples along rows
  std::vector<float> z(kBlock * Dc), G(Dr * Dc), MT(D * D), zd(kBlock * D);
  for (int64_t i = 0; i < D; ++i)
    for (int64_t j = 0; j < D; ++j) MT[j * D + i] = M[i * D + j];
  float F[kBlock], dF[kBlock], loss_b[kBlock];
  double loss = 0.0;
  for (int64_t s0 = 0; s0 < n; s0 += kBlock) {
    const int64_t nb = n - s0 < kBlock ? n - s0 : kBlock;
    const float* Xb = X + s0 * D * d;
    // zd (nb, D), then dz: z of the block's rows r = b D + j, four rows at a time (four independent
    // sums, not one chain).
    const int64_t rows = nb * D;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      const float *x0 = Xb + r * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
      for (int64_t k = 0; k < d; ++k) {
        a0 += x0[k] * v[k], a1 += x1[k] * v[k], a2 += x2[k] * v[k], a3 += x3[k] * v[k];
      }
      zd[r] = a0, zd[r + 1] = a1, zd[r + 2] = a2, zd[r + 3] = a3;
    }
    for (; r < rows; ++r) {
      const float* x0 = Xb + r * d;
      float a0 = 0.f;
      for (int64_t k = 0; k < d; ++k) a0 += x0[k] * v[k];
      zd[r] = a0;
    }
    for (int64_t b = 0; b < kBlock; ++b)  // 0 past the last sample: its weight is 0 below
      for (int64_t j = 0; j < D; ++j) zT[j * kBlock + b] = z[b * Dc + j] = b < nb ? zd[b * D + j] : 0.f;
    MixRows<W>(M, zT.data(), duT.data(), D);  // u
    for (int64_t b = 0; b < kBlock; ++b) F[b] = 0.f;
    for (int64_t i = 0; i < D; ++i) {
      float* u = duT.data() + i * kBlock;  // u_i, replaced by sigma'(u_i)
      for (int64_t b = 0; b < kBlock; ++b) {
        const float u2 = u[b] * u[b];
        if (quintic) {  // sigma(u) = u^5 + 0.03 u
          F[b] += u2 * u2 * u[b] + 0.03f * u[b];
          u[b] = 5.f * u2 * u2 + 0.03f;
        } else {  // sigma(u) = u^3
          F[b] += u2 * u[b];
          u[b] = 3.f * u2;
        }
      }
    }
    for (int64_t b = 0; b < kBlock; ++b) {
      const float yb = b < nb ? y[s0 + b] : 0.f, wb = b < nb ? w[s0 + b] : 0.f;
      const float margin = yb * F[b];
      // log(1 + exp(-m)) = log1p(exp(-|m|)) + max(-m, 0), and its derivative -1 / (1 + exp(m)).
      const float e = std::exp(-std::fabs(margin));
      loss_b[b] = wb * (std::log1p(e) + std::fmax(-margin, 0.f));
      dF[b] = -wb * yb * (margin >= 0.f ? e : 1.f) / (1.f + e);
    }
    for (int64_t b = 0; b < kBlock; ++b) loss += loss_b[b];
    for (int64_t i = 0; i < D; ++i)
      for (int64_t b = 0; b < kBlock; ++b) duT[i * kBlock + b] *= dF[b];
    AccumulateOuter<W>(duT.data(), z.data(), G.data(), Dr, Dc);  // dM
    MixRows<W>(MT.data(), duT.data(), dzT.data(), D);  // dz
    for (int64_t j = 0; j < D; ++j)
      for (int64_t b = 0; b < nb; ++b) zd[b * D + j] = dzT[j * kBlock + b];
    // dv += sum over the block's rows of dz_r X_r, four rows at a time: a quarter of the loads and
    // stores of dv, and the rows read again from cache.
    for (r = 0; r + 4 <= rows; r += 4) {
      const float *x0 = Xb + r * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
      const float g0 = zd[r], g1 = zd[r + 1], g2 = zd[r + 2], g3 = zd[r + 3];
      for (int64_t k = 0; k < d; ++k) out->dv[k] += g0 * x0[k] + g1 * x1[k] + g2 * x2[k] + g3 * x3[k];
    }
    for (; r < rows; ++r) {
      const float* x0 = Xb + r * d;
      for (int64_t k = 0; k < d; ++k) out->dv[k] += zd[r] * x0[k];
    }
  }
  for (int64_t i = 0; i < D; ++i)
    for (int64_t j = 0; j < D; ++j) out->dM[i * D + j] += G[i * Dc + j];
  out->loss = loss;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// An AVX2 + FMA instance beside the baseline (SSE2) one, chosen at run time, so that the library built
// on one x86-64 machine runs on any other.
__attribute__((target("arch=x86-64-v3"))) void OnePassAvx2(const Problem& p, Sums* out) { OnePassW<8>(p, out); }
bool UseAvx2() {
  static const bool avx2 = [] {
    // POSATTN_CPU_KERNEL=baseline keeps to the baseline instance (to test it on an AVX2 machine).
    const char* mode = std::getenv("POSATTN_CPU_KERNEL");
    if (mode && std::strcmp(mode, "baseline") == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return avx2;
}
void OnePass(const Problem& p, Sums* out) { UseAvx2() ? OnePassAvx2(p, out) : OnePassW<4>(p, out); }
#else
bool UseAvx2() { return false; }
void OnePass(const Problem& p, Sums* out) { OnePassW<4>(p, out); }
#endif

// The strides, in elements, of a buffer's leading (batch) dimensions over blocks of `core_size`
// elements; 0 where the dimension is 1 (broadcast).
template <typename Dims>
std::vector<int64_t> BatchStrides(Dims dims, const std::vector<int64_t>& batch, int64_t core_size) {
  std::vector<int64_t> strides(batch.size(), 0);
  int64_t stride = core_size;
  for (size_t a = batch.size(); a-- > 0;) {
    strides[a] = dims[a] == 1 ? 0 : stride;
    stride *= dims[a];
  }
  return strides;
}

ffi::Error OnePassImpl(ffi::Buffer<ffi::F32> X, ffi::Buffer<ffi::F32> y, ffi::Buffer<ffi::F32> w,
                       ffi::Buffer<ffi::F32> M, ffi::Buffer<ffi::F32> v, int32_t quintic,
                       ffi::ResultBuffer<ffi::F32> loss, ffi::ResultBuffer<ffi::F32> dM,
                       ffi::ResultBuffer<ffi::F32> dv) {
  const auto xd = X.dimensions();
  const size_t nb = loss->dimensions().size();  // the batch rank
  if (xd.size() != nb + 3 || y.dimensions().size() != nb + 1 || w.dimensions().size() != nb + 1 ||
      M.dimensions().size() != nb + 2 || v.dimensions().size() != nb + 1)
    return ffi::Error::InvalidArgument("posattn_one_pass: X, y, w, M, v must be (..., n, D, d), "
                                       "(..., n), (..., n), (..., D, D), (..., d)");
  const int64_t n = xd[nb], D = xd[nb + 1], d = xd[nb + 2];
  if (y.dimensions()[nb] != n || w.dimensions()[nb] != n || M.dimensions()[nb] != D ||
      M.dimensions()[nb + 1] != D || v.dimensions()[nb] != d)
    return ffi::Error::InvalidArgument("posattn_one_pass: the shapes of X, y, w, M and v disagree");
  std::vector<int64_t> batch(loss->dimensions().begin(), loss->dimensions().end());
  int64_t count = 1;
  for (int64_t b : batch) count *= b;
  const auto sX = BatchStrides(xd, batch, n * D * d), sy = BatchStrides(y.dimensions(), batch, n),
             sw = BatchStrides(w.dimensions(), batch, n), sM = BatchStrides(M.dimensions(), batch, D * D),
             sv = BatchStrides(v.dimensions(), batch, d);
  std::memset(dM->typed_data(), 0, sizeof(float) * count * D * D);
  std::memset(dv->typed_data(), 0, sizeof(float) * count * d);
  for (int64_t c = 0; c < count; ++c) {
    int64_t oX = 0, oy = 0, ow = 0, oM = 0, ov = 0;
    for (int64_t a = batch.size(), rest = c; a-- > 0; rest /= batch[a]) {
      const int64_t i = rest % batch[a];
      oX += i * sX[a], oy += i * sy[a], ow += i * sw[a], oM += i * sM[a], ov += i * sv[a];
    }
    Sums sums{0.0, dM->typed_data() + c * D * D, dv->typed_data() + c * d};
    OnePass({X.typed_data() + oX, y.typed_data() + oy, w.typed_data() + ow, M.typed_data() + oM,
             v.typed_data() + ov, n, D, d, quintic != 0},
            &sums);
    loss->typed_data()[c] = static_cast<float>(sums.loss);
  }
  return ffi::Error::Success();
}

}  // namespace

// The vector lanes of the instance this process runs (8: AVX2, 4: the baseline), for the tests.
extern "C" int PosattnOnePassLanes() { return UseAvx2() ? 8 : 4; }

XLA_FFI_DEFINE_HANDLER_SYMBOL(PosattnOnePass, OnePassImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // X
                                  .Arg<ffi::Buffer<ffi::F32>>()  // y
                                  .Arg<ffi::Buffer<ffi::F32>>()  // w
                                  .Arg<ffi::Buffer<ffi::F32>>()  // M
                                  .Arg<ffi::Buffer<ffi::F32>>()  // v
                                  .Attr<int32_t>("quintic")
                                  .Ret<ffi::Buffer<ffi::F32>>()  // loss
                                  .Ret<ffi::Buffer<ffi::F32>>()  // dM
                                  .Ret<ffi::Buffer<ffi::F32>>());  // dv
