// Softmax over the last dimension with top-k; twin of kernels/src/softmax.rs.
// One block per row (blockDim.x a power of two <= 1024). Top-k takes k
// block-wide arg-max passes, each over the entries that rank after the
// previous pick in (logit desc, index asc) order, so no scratch memory or
// sort is needed and ties resolve exactly as on the CPU.

#define MAX_THREADS 1024

__device__ __forceinline__ bool ranks_before(float av, int ai, float bv, int bi) {
    return av > bv || (av == bv && ai < bi);
}

extern "C" __global__ void softmax_topk(
    const float* __restrict__ logits,
    float* __restrict__ probs,
    unsigned int* __restrict__ indices,
    int cols, int k)
{
    __shared__ float s_val[MAX_THREADS];
    __shared__ int s_idx[MAX_THREADS];
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const float* x = logits + (size_t)row * cols;
    const float neg_inf = __int_as_float(0xff800000);

    float m = neg_inf;
    for (int i = tid; i < cols; i += blockDim.x) m = fmaxf(m, x[i]);
    s_val[tid] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) s_val[tid] = fmaxf(s_val[tid], s_val[tid + s]);
        __syncthreads();
    }
    m = s_val[0];
    __syncthreads();

    float sum = 0.0f;
    for (int i = tid; i < cols; i += blockDim.x) sum += expf(x[i] - m);
    s_val[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) s_val[tid] += s_val[tid + s];
        __syncthreads();
    }
    sum = s_val[0];
    __syncthreads();

    // (prev_v, prev_i) = last pick; everything ranking before it is taken.
    float prev_v = __int_as_float(0x7f800000);
    int prev_i = -1;
    for (int t = 0; t < k; ++t) {
        float best_v = neg_inf;
        int best_i = -1;
        for (int i = tid; i < cols; i += blockDim.x) {
            const float v = x[i];
            if (ranks_before(prev_v, prev_i, v, i) &&
                (best_i < 0 || ranks_before(v, i, best_v, best_i))) {
                best_v = v;
                best_i = i;
            }
        }
        s_val[tid] = best_v;
        s_idx[tid] = best_i;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (tid < s) {
                const int oi = s_idx[tid + s];
                if (oi >= 0 && (s_idx[tid] < 0 || ranks_before(s_val[tid + s], oi, s_val[tid], s_idx[tid]))) {
                    s_val[tid] = s_val[tid + s];
                    s_idx[tid] = oi;
                }
            }
            __syncthreads();
        }
        prev_v = s_val[0];
        prev_i = s_idx[0];
        if (tid == 0) {
            probs[(size_t)row * k + t] = expf(prev_v - m) / sum;
            indices[(size_t)row * k + t] = (unsigned int)prev_i;
        }
        __syncthreads();
    }
}
