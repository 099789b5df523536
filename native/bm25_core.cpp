// fastrag's native BM25 top-k core: the scoring of fastrag.vector_store.sqlite.lexical.bm25_top in C++,
// run with the GIL released from the moment the query terms' postings are known to the moment the
// candidates (rowids and scores) are ready.
//
// Input per query term: its postings over every segment (rowids ascending, int32), the BM25
// term-frequency part of each posting (float32, (k1 + 1) * tf / (tf + norm)), the maximum of those
// weights per block of BLOCK postings, and qtf (how many times the query holds the term). The idf is
// Lucene's ln(1 + (N - df + 0.5) / (df + 0.5)), df counted over the live postings, exactly as the numpy
// reference does; a document's score is the sum over its terms of qtf * idf * weight, added in the
// order the terms are given (the reference's order, so equal documents get equal scores bit for bit).
//
// Two evaluation strategies, both exact:
// - dense term-at-a-time (few documents): a score per rowid, then one pass keeping the best k;
// - block-max MaxScore (Turtle & Flood 1995; block-max bounds of Ding & Suel 2011, evaluated as
//   Mallia, Siedlaczek & Suel 2019 describe BMM), document-at-a-time into a top-k heap: terms whose
//   bounds sum below the k-th best score are "non-essential": a document is found only through the
//   essential terms, and the non-essential ones are probed for it only while the block maxima of the
//   blocks holding it can still lift it into the top k.
//
// Ties: the output holds every document whose score is at least the k-th best score (all documents
// tied at the cut), because the caller breaks ties by the documents' string ids, which this core does
// not know. Pruning therefore only drops a document whose upper bound is strictly below the cut (with a
// relative slack of 1e-9 for the rounding of bounds summed in another order).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int64_t BLOCK = 128;
constexpr int32_t END = std::numeric_limits<int32_t>::max();
constexpr double SLACK = 1e-9;

struct Term {
    const int32_t* docs;
    const float* weights;
    const float* block_max;  // may be null: computed into own_block_max
    int64_t n;
    double qtf;
    std::vector<float> own_block_max;
    double idf = 0.0;  // qtf * idf
    double ub = 0.0;   // idf * max weight
    int order = 0;     // position in the caller's list (summation order)
};

// The k best (score, rowid) pairs, plus every pair tied with the k-th best score.
class TopK {
   public:
    explicit TopK(int64_t k) : k_(k) {}
    // the score a document must reach to enter (0 until k are held: every score is > 0)
    double threshold() const { return static_cast<int64_t>(heap_.size()) < k_ ? 0.0 : heap_.top().first; }
    void insert(double score, int32_t rowid) {
        if (static_cast<int64_t>(heap_.size()) < k_) {
            heap_.emplace(score, rowid);
            return;
        }
        double cut = heap_.top().first;
        if (score < cut) return;
        if (score == cut) {
            ties_.emplace_back(score, rowid);
            return;
        }
        auto popped = heap_.top();
        heap_.pop();
        heap_.emplace(score, rowid);
        double now = heap_.top().first;
        if (now > cut) {
            ties_.clear();
            if (popped.first == now) ties_.push_back(popped);
        } else {
            ties_.push_back(popped);
        }
    }
    std::vector<std::pair<double, int32_t>> take() {
        std::vector<std::pair<double, int32_t>> out(std::move(ties_));
        double cut = heap_.empty() ? 0.0 : heap_.top().first;
        out.erase(std::remove_if(out.begin(), out.end(), [cut](auto& p) { return p.first < cut; }), out.end());
        while (!heap_.empty()) {
            out.push_back(heap_.top());
            heap_.pop();
        }
        std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.second < b.second; });
        return out;
    }

   private:
    int64_t k_;
    std::priority_queue<std::pair<double, int32_t>, std::vector<std::pair<double, int32_t>>, std::greater<>> heap_;
    std::vector<std::pair<double, int32_t>> ties_;
};

inline bool ok(int32_t d, const uint8_t* live, int64_t live_n, const uint8_t* allowed, int64_t allowed_n) {
    // rowids past the end of a mask: live (the reference pads), not allowed (a filter names its rowids)
    if (live && d < live_n && !live[d]) return false;
    if (allowed && (d >= allowed_n || !allowed[d])) return false;
    return true;
}

void block_maxima(const float* w, int64_t n, std::vector<float>& out) {
    int64_t blocks = (n + BLOCK - 1) / BLOCK;
    out.assign(blocks, 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
        float m = 0.0f;
        int64_t hi = std::min(n, (b + 1) * BLOCK);
        for (int64_t i = b * BLOCK; i < hi; ++i) m = std::max(m, w[i]);
        out[b] = m;
    }
}

// dense term-at-a-time: O(size + postings)
void dense(std::vector<Term>& terms, const uint8_t* live, int64_t live_n, const uint8_t* allowed, int64_t allowed_n,
           int64_t size, TopK& top) {
    std::vector<double> acc(size, 0.0);
    for (auto& t : terms) {  // in the caller's order: the reference's order of summation
        for (int64_t i = 0; i < t.n; ++i) {
            int32_t d = t.docs[i];
            if (!ok(d, live, live_n, allowed, allowed_n)) continue;
            acc[d] += t.idf * static_cast<double>(t.weights[i]);
        }
    }
    for (int64_t d = 0; d < size; ++d)
        if (acc[d] > 0.0 && acc[d] >= top.threshold()) top.insert(acc[d], static_cast<int32_t>(d));
}

struct Cursor {
    Term* t;
    int64_t pos = 0;
    int64_t block = 0;
    int32_t doc() const { return pos < t->n ? t->docs[pos] : END; }
    void next() { ++pos; }
    // the first posting >= target (galloping then binary search)
    void next_geq(int32_t target) {
        if (pos >= t->n || t->docs[pos] >= target) return;
        int64_t step = 1, lo = pos, hi = pos + 1;
        while (hi < t->n && t->docs[hi] < target) {
            lo = hi;
            step <<= 1;
            hi = pos + step;
        }
        hi = std::min(hi, t->n);
        pos = std::lower_bound(t->docs + lo, t->docs + hi, target) - t->docs;
    }
    // the block maximum of the block that would hold target (0 past the list's end)
    float block_max_at(int32_t target) {
        int64_t blocks = (t->n + BLOCK - 1) / BLOCK;
        while (block < blocks && t->docs[std::min(t->n, (block + 1) * BLOCK) - 1] < target) ++block;
        return block < blocks ? t->block_max[block] : 0.0f;
    }
};

// block-max MaxScore, document-at-a-time
void bmm(std::vector<Term>& terms, const uint8_t* live, int64_t live_n, const uint8_t* allowed, int64_t allowed_n,
         TopK& top) {
    const int n = static_cast<int>(terms.size());
    std::vector<Cursor> cur(n);
    for (int i = 0; i < n; ++i) cur[i].t = &terms[i];
    std::sort(cur.begin(), cur.end(), [](const Cursor& a, const Cursor& b) { return a.t->ub < b.t->ub; });
    std::vector<double> prefix(n);  // prefix[i]: bounds of cur[0..i]
    double run = 0.0;
    for (int i = 0; i < n; ++i) prefix[i] = (run += cur[i].t->ub);
    std::vector<double> contrib(n, 0.0);  // by the caller's order
    std::vector<char> has(n, 0);
    std::vector<double> bm(n, 0.0);
    int ne = 0;  // cur[0..ne): non-essential
    auto below = [&](double bound) { return bound < top.threshold() * (1.0 - SLACK); };
    int32_t d = END;
    for (int i = 0; i < n; ++i) d = std::min(d, cur[i].doc());
    while (ne < n && d != END) {
        int32_t next = END;
        bool keep = ok(d, live, live_n, allowed, allowed_n);
        double s = 0.0;
        for (int i = ne; i < n; ++i) {
            if (cur[i].doc() == d) {
                if (keep) {
                    double c = cur[i].t->idf * static_cast<double>(cur[i].t->weights[cur[i].pos]);
                    s += c;
                    contrib[cur[i].t->order] = c;
                    has[cur[i].t->order] = 1;
                }
                cur[i].next();
            }
            next = std::min(next, cur[i].doc());
        }
        if (keep) {
            bool pruned = false;
            if (ne > 0) {
                double rest = 0.0;
                for (int i = ne - 1; i >= 0; --i) rest += (bm[i] = cur[i].t->idf * cur[i].block_max_at(d));
                if (below(s + rest)) {
                    pruned = true;
                } else {
                    for (int i = ne - 1; i >= 0; --i) {
                        rest -= bm[i];
                        cur[i].next_geq(d);
                        if (cur[i].doc() == d) {
                            double c = cur[i].t->idf * static_cast<double>(cur[i].t->weights[cur[i].pos]);
                            s += c;
                            contrib[cur[i].t->order] = c;
                            has[cur[i].t->order] = 1;
                        }
                        if (i > 0 && below(s + rest)) {
                            pruned = true;
                            break;
                        }
                    }
                }
            }
            if (!pruned) {
                double exact = 0.0;
                for (int j = 0; j < n; ++j)
                    if (has[j]) exact += contrib[j];
                if (exact > 0.0) top.insert(exact, d);
                while (ne < n && below(prefix[ne])) ++ne;
            }
            std::fill(has.begin(), has.end(), 0);
        }
        if (ne > 0) {  // terms may have turned non-essential: the next document comes from the essential ones
            next = END;
            for (int i = ne; i < n; ++i) next = std::min(next, cur[i].doc());
        }
        d = next;
    }
}

py::tuple bm25_top(const std::vector<py::array_t<int32_t, py::array::c_style | py::array::forcecast>>& docs,
                   const std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>>& weights,
                   const std::vector<py::object>& block_max, const std::vector<double>& qtf, py::object live_obj,
                   py::object allowed_obj, int64_t n_docs, int64_t size, int64_t k, int strategy) {
    const size_t n = docs.size();
    if (weights.size() != n || block_max.size() != n || qtf.size() != n)
        throw std::invalid_argument("docs, weights, block_max and qtf must have one entry per term");
    if (k <= 0) throw std::invalid_argument("k must be > 0");
    std::vector<Term> terms(n);
    std::vector<py::array_t<float, py::array::c_style>> held_bm;  // keep the arrays alive
    for (size_t i = 0; i < n; ++i) {
        if (docs[i].ndim() != 1 || weights[i].ndim() != 1 || docs[i].shape(0) != weights[i].shape(0))
            throw std::invalid_argument("each term's docs and weights must be 1-d and of one length");
        Term& t = terms[i];
        t.docs = docs[i].data();
        t.weights = weights[i].data();
        t.n = docs[i].shape(0);
        t.qtf = qtf[i];
        t.order = static_cast<int>(i);
        t.block_max = nullptr;
        if (!block_max[i].is_none()) {
            auto a = py::array_t<float, py::array::c_style>::ensure(block_max[i]);
            if (!a || a.ndim() != 1 || a.shape(0) != (t.n + BLOCK - 1) / BLOCK)
                throw std::invalid_argument("block_max must hold one float32 per block of 128 postings");
            held_bm.push_back(a);
            t.block_max = a.data();
        }
    }
    const uint8_t* live = nullptr;
    int64_t live_n = 0;
    py::array_t<uint8_t, py::array::c_style> live_arr, allowed_arr;
    if (!live_obj.is_none()) {
        live_arr = py::array_t<uint8_t, py::array::c_style>::ensure(live_obj);
        if (!live_arr) throw std::invalid_argument("live must be a bool array");
        live = live_arr.data();
        live_n = live_arr.shape(0);
    }
    const uint8_t* allowed = nullptr;
    int64_t allowed_n = 0;
    if (!allowed_obj.is_none()) {
        allowed_arr = py::array_t<uint8_t, py::array::c_style>::ensure(allowed_obj);
        if (!allowed_arr) throw std::invalid_argument("allowed must be a bool array");
        allowed = allowed_arr.data();
        allowed_n = allowed_arr.shape(0);
    }
    std::vector<std::pair<double, int32_t>> out;
    {
        py::gil_scoped_release release;
        std::vector<Term> used;
        used.reserve(n);
        int64_t total = 0;
        int32_t max_doc = -1;
        for (auto& t : terms) {
            int64_t df = t.n;
            if (live) {
                df = 0;
                for (int64_t i = 0; i < t.n; ++i) {
                    int32_t d = t.docs[i];
                    df += (d >= live_n || live[d]) ? 1 : 0;
                }
            }
            if (df == 0) continue;
            // numpy: np.log1p((n_docs - df + 0.5) / (df + 0.5)), times float(qtf)
            t.idf = std::log1p((static_cast<double>(n_docs - df) + 0.5) / (static_cast<double>(df) + 0.5)) * t.qtf;
            if (!t.block_max) {
                block_maxima(t.weights, t.n, t.own_block_max);
                t.block_max = t.own_block_max.data();
            }
            float m = 0.0f;
            for (int64_t b = 0, blocks = (t.n + BLOCK - 1) / BLOCK; b < blocks; ++b) m = std::max(m, t.block_max[b]);
            t.ub = t.idf * static_cast<double>(m);
            total += t.n;
            max_doc = std::max(max_doc, t.docs[t.n - 1]);
            used.push_back(std::move(t));
        }
        for (size_t i = 0; i < used.size(); ++i) used[i].order = static_cast<int>(i);
        TopK top(k);
        if (!used.empty()) {
            int64_t span = std::max<int64_t>(size, static_cast<int64_t>(max_doc) + 1);
            // strategy: 0 automatic, 1 dense, 2 block-max MaxScore
            bool use_dense = strategy == 1 || (strategy == 0 && (used.size() == 1 ? false : span <= 4 * total));
            if (use_dense)
                dense(used, live, live_n, allowed, allowed_n, span, top);
            else
                bmm(used, live, live_n, allowed, allowed_n, top);
        }
        out = top.take();
    }
    py::array_t<int64_t> rowids(static_cast<py::ssize_t>(out.size()));
    py::array_t<double> scores(static_cast<py::ssize_t>(out.size()));
    auto r = rowids.mutable_unchecked<1>();
    auto s = scores.mutable_unchecked<1>();
    for (size_t i = 0; i < out.size(); ++i) {
        r(i) = out[i].second;
        s(i) = out[i].first;
    }
    return py::make_tuple(rowids, scores);
}

py::array_t<float> block_max_of(py::array_t<float, py::array::c_style> weights) {
    std::vector<float> out;
    {
        py::gil_scoped_release release;
        block_maxima(weights.data(), weights.shape(0), out);
    }
    py::array_t<float> a(static_cast<py::ssize_t>(out.size()));
    std::copy(out.begin(), out.end(), a.mutable_data());
    return a;
}

}  // namespace

PYBIND11_MODULE(bm25_core, m) {
    m.doc() = "fastrag's native BM25 top-k core (block-max MaxScore; the GIL is released while scoring)";
    m.attr("BLOCK") = BLOCK;
    m.def("bm25_top", &bm25_top, py::arg("docs"), py::arg("weights"), py::arg("block_max"), py::arg("qtf"),
          py::arg("live"), py::arg("allowed"), py::arg("n_docs"), py::arg("size"), py::arg("k"),
          py::arg("strategy") = 0);
    m.def("block_max", &block_max_of, py::arg("weights"));
}
