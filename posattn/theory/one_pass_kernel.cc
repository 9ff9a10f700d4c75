// The risk (E) of Eq. (T) and its gradient in one pass over X, per sample while its D x d values are in
// the core's L1 cache: an XLA FFI handler for the CPU (posattn/theory/one_pass_kernel.py builds and
// registers it; posattn/theory/fused.py calls it). Per block of kBlock samples:
//   z_nj = <v, X_nj>,  u_ni = sum_j M_ij z_nj,  F_n = sum_i sigma(u_ni),  l_n = w_n log(1 + exp(-y_n F_n)),
//   du_ni = (dl_n / dF_n) sigma'(u_ni),  dM += du^T z,  dz_nj = sum_i M_ij du_ni,  dv += sum_nj dz_nj X_nj,
// where M is the score matrix S of Definition 3.2, times D when Eq. (T) scales by D. The sums over
// samples are returned unnormalised (loss, dM, dv), so that sums over devices add up.
//
// Inputs X (..., n, D, d), y (..., n), w (..., n), M (..., D, D), v (..., d), float32; the leading
// (batch) dimensions of each are those of the outputs or 1 (`vmap_method="expand_dims"`), so that a
// vmapped call never broadcasts X.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Samples per block: the loss and its gradient run over a block at a time, vectorised over the
// block's samples (the D x D mix and the exponentials), while the block's X stays in L1/L2.
constexpr int64_t kBlock = 32;

struct Sums {
  double loss;
  float* dM;  // (D, D)
  float* dv;  // (d,)
};

// target_clones: an AVX2 + FMA version beside the baseline one, chosen when the library loads, so that
// the library built on one x86-64 machine runs on any other.
#if defined(__x86_64__) && defined(__linux__)
#define POSATTN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define POSATTN_CLONES
#endif

POSATTN_CLONES
void OnePass(const float* X, const float* y, const float* w, const float* M, const float* v, int64_t n,
             int64_t D, int64_t d, bool quintic, Sums* out) {
  std::vector<float> buf(4 * D * kBlock);
  float* zT = buf.data();                 // (D, kBlock): z_nj, the block's samples along the rows
  float* duT = zT + D * kBlock;           // (D, kBlock): sigma'(u_ni), then du_ni
  float* dzT = duT + D * kBlock;          // (D, kBlock)
  float* dz = dzT + D * kBlock;           // (kBlock, D): z, then dz, in X's order
  float F[kBlock], dF[kBlock], loss_b[kBlock], u[kBlock];
  double loss = 0.0;
  for (int64_t s0 = 0; s0 < n; s0 += kBlock) {
    const int64_t nb = n - s0 < kBlock ? n - s0 : kBlock;
    const float* Xb = X + s0 * D * d;
    // z of the block's rows r = b D + j, four rows at a time: four independent sums, not one chain.
    const int64_t rows = nb * D;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      const float *x0 = Xb + r * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
      for (int64_t k = 0; k < d; ++k) {
        a0 += x0[k] * v[k], a1 += x1[k] * v[k], a2 += x2[k] * v[k], a3 += x3[k] * v[k];
      }
      dz[r] = a0, dz[r + 1] = a1, dz[r + 2] = a2, dz[r + 3] = a3;
    }
    for (; r < rows; ++r) {
      const float* x0 = Xb + r * d;
      float a0 = 0.f;
      for (int64_t k = 0; k < d; ++k) a0 += x0[k] * v[k];
      dz[r] = a0;
    }
    for (int64_t j = 0; j < D; ++j)  // 0 past the last sample: its weight is 0 below
      for (int64_t b = 0; b < kBlock; ++b) zT[j * kBlock + b] = b < nb ? dz[b * D + j] : 0.f;
    for (int64_t b = 0; b < kBlock; ++b) F[b] = 0.f;
    for (int64_t i = 0; i < D; ++i) {
      for (int64_t b = 0; b < kBlock; ++b) u[b] = 0.f;
      for (int64_t j = 0; j < D; ++j) {
        const float m = M[i * D + j];
        for (int64_t b = 0; b < kBlock; ++b) u[b] += m * zT[j * kBlock + b];
      }
      for (int64_t b = 0; b < kBlock; ++b) {
        const float u2 = u[b] * u[b];
        if (quintic) {  // sigma(u) = u^5 + 0.03 u
          F[b] += u2 * u2 * u[b] + 0.03f * u[b];
          duT[i * kBlock + b] = 5.f * u2 * u2 + 0.03f;
        } else {  // sigma(u) = u^3
          F[b] += u2 * u[b];
          duT[i * kBlock + b] = 3.f * u2;
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
    std::memset(dzT, 0, sizeof(float) * D * kBlock);
    for (int64_t i = 0; i < D; ++i) {
      for (int64_t j = 0; j < D; ++j) {
        const float m = M[i * D + j];
        float acc = 0.f;
        for (int64_t b = 0; b < kBlock; ++b) {
          acc += duT[i * kBlock + b] * zT[j * kBlock + b];
          dzT[j * kBlock + b] += m * duT[i * kBlock + b];
        }
        out->dM[i * D + j] += acc;
      }
    }
    for (int64_t j = 0; j < D; ++j)
      for (int64_t b = 0; b < nb; ++b) dz[b * D + j] = dzT[j * kBlock + b];
    // dv += sum over the block's rows of dz_r X_r, four rows at a time: a quarter of the loads and
    // stores of dv, and the rows read again from cache.
    for (r = 0; r + 4 <= rows; r += 4) {
      const float *x0 = Xb + r * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
      const float g0 = dz[r], g1 = dz[r + 1], g2 = dz[r + 2], g3 = dz[r + 3];
      for (int64_t k = 0; k < d; ++k) out->dv[k] += g0 * x0[k] + g1 * x1[k] + g2 * x2[k] + g3 * x3[k];
    }
    for (; r < rows; ++r) {
      const float* x0 = Xb + r * d;
      for (int64_t k = 0; k < d; ++k) out->dv[k] += dz[r] * x0[k];
    }
  }
  out->loss = loss;
}

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
    OnePass(X.typed_data() + oX, y.typed_data() + oy, w.typed_data() + ow, M.typed_data() + oM,
            v.typed_data() + ov, n, D, d, quintic != 0, &sums);
    loss->typed_data()[c] = static_cast<float>(sums.loss);
  }
  return ffi::Error::Success();
}

}  // namespace

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
