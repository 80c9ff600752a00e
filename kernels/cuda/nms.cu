// Class-aware greedy NMS; twin of kernels/src/nms.rs, keeping exactly the
// same indices. Three launches per call:
//   nms_rank:   each candidate above the score threshold counts how many
//               candidates come before it (score desc, index asc) -> its slot
//               in the sorted order. O(B^2) compares, no sort library needed.
//   nms_mask:   bit j of row i = same class && IoU(sorted i, sorted j) > thr
//               for j > i (64-bit words, torchvision's layout).
//   nms_select: one warp per item walks the sorted order, keeping a box when
//               its bit is not set in the running `removed` mask (shared
//               memory) and OR-ing the kept box's row into it.
// IoU is written with _rn intrinsics: NVRTC would otherwise contract a*b+c
// into an FMA and the result could differ from the CPU's in the last bit,
// flipping a decision at the threshold.

struct Candidate {
    float x1, y1, x2, y2, score;
    unsigned int cls;
};

__device__ __forceinline__ float area(const Candidate& c) {
    return __fmul_rn(fmaxf(__fsub_rn(c.x2, c.x1), 0.0f), fmaxf(__fsub_rn(c.y2, c.y1), 0.0f));
}

__device__ __forceinline__ float iou(const Candidate& a, const Candidate& b) {
    const float w = fmaxf(__fsub_rn(fminf(a.x2, b.x2), fmaxf(a.x1, b.x1)), 0.0f);
    const float h = fmaxf(__fsub_rn(fminf(a.y2, b.y2), fmaxf(a.y1, b.y1)), 0.0f);
    const float inter = __fmul_rn(w, h);
    const float uni = __fsub_rn(__fadd_rn(area(a), area(b)), inter);
    return uni > 0.0f ? __fdiv_rn(inter, uni) : 0.0f;
}

// grid (ceil(B / blockDim.x), N); `sorted` is [N][B], `count` is [N] zeroed.
extern "C" __global__ void nms_rank(
    const Candidate* __restrict__ cands, int boxes, float score_threshold,
    int* __restrict__ sorted, int* __restrict__ count)
{
    const int n = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const Candidate* item = cands + (size_t)n * boxes;
    if (i >= boxes) return;
    const float s = item[i].score;
    if (!(s > score_threshold)) return;
    int rank = 0;
    for (int j = 0; j < boxes; ++j) {
        const float t = item[j].score;
        if (t > score_threshold && (t > s || (t == s && j < i))) ++rank;
    }
    sorted[(size_t)n * boxes + rank] = i;
    atomicAdd(&count[n], 1);
}

// grid (words, ceil(B / 64), N), block 64; `mask` is [N][B][words].
extern "C" __global__ void nms_mask(
    const Candidate* __restrict__ cands, int boxes, int words,
    const int* __restrict__ sorted, const int* __restrict__ count,
    float iou_threshold, unsigned long long* __restrict__ mask)
{
    __shared__ Candidate cols[64];
    const int n = blockIdx.z;
    const int m = count[n];
    const int row = blockIdx.y * 64 + threadIdx.x;
    const int col0 = blockIdx.x * 64;
    // Row i only ever reads words >= i / 64 (columns j > i): skip the rest.
    if (blockIdx.y * 64 >= m || col0 >= m || blockIdx.x < blockIdx.y) return;
    const Candidate* item = cands + (size_t)n * boxes;
    const int* order = sorted + (size_t)n * boxes;
    if (col0 + threadIdx.x < m) cols[threadIdx.x] = item[order[col0 + threadIdx.x]];
    __syncthreads();
    if (row >= m) return;
    const Candidate a = item[order[row]];
    unsigned long long bits = 0;
    const int ncols = min(64, m - col0);
    for (int t = 0; t < ncols; ++t) {
        const int j = col0 + t;
        if (j > row && cols[t].cls == a.cls && iou(a, cols[t]) > iou_threshold) {
            bits |= 1ull << t;
        }
    }
    mask[((size_t)n * boxes + row) * words + blockIdx.x] = bits;
}

// grid N, block 32 (one warp), dynamic shared memory words * 8 bytes.
// `keep` is [N][max_det] original indices, `kept` is [N].
extern "C" __global__ void nms_select(
    const int* __restrict__ sorted, const int* __restrict__ count,
    const unsigned long long* __restrict__ mask, int boxes, int words, int max_det,
    int* __restrict__ keep, int* __restrict__ kept)
{
    extern __shared__ unsigned long long removed[];
    const int n = blockIdx.x;
    const int lane = threadIdx.x;
    const int m = count[n];
    for (int w = lane; w < words; w += 32) removed[w] = 0ull;
    __syncwarp();
    int nkept = 0;
    for (int i = 0; i < m && nkept < max_det; ++i) {
        if (removed[i / 64] & (1ull << (i % 64))) continue;
        if (lane == 0) keep[(size_t)n * max_det + nkept] = sorted[(size_t)n * boxes + i];
        ++nkept;
        const unsigned long long* row = mask + ((size_t)n * boxes + i) * words;
        for (int w = i / 64 + lane; w < words; w += 32) removed[w] |= row[w];
        __syncwarp();
    }
    if (lane == 0) kept[n] = nkept;
}
