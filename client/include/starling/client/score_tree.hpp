#pragma once
// ScoreTree: the table proposal's sampling structure (docs/model.md, "The table
// proposal"): a Fenwick (binary indexed) tree over n entries, each a pair (key_i, age_i),
// whose sums over any prefix give the mass of that prefix under the sampler's reverting
// scores
//
//   mass_i = m + down (key_i - m age_i),   m the mean score, down = ageing^(t - t0),
//
// for any m and down chosen at query time: the mass of a set of c entries is
// m c + down (sum key - m sum age). So the ageing of every score, and a change of the
// mean, cost nothing; setting one entry is O(log n) and so is drawing one by mass
// (find()), instead of a pass over blocks of the table.
//
// Sums are kept in double; set() adds the change to O(log n) nodes, so rounding
// accumulates until rebuild() (the sampler's rebase(), which also rescales the keys)
// sums every node afresh from the entries in O(n).
//
// Ownership and threads: a plain value; one thread at a time.

#include <cstddef>
#include <vector>

namespace starling::client {

class ScoreTree {
 public:
  // n entries, all (0, 0).
  explicit ScoreTree(std::size_t n = 0) { reset(n); }

  void reset(std::size_t n) {
    entries_.assign(n, Pair{});
    nodes_.assign(n + 1, Pair{});
    top_ = 1;
    while (top_ * 2 <= n)
      top_ *= 2;
  }

  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  double key(std::size_t i) const { return entries_[i].key; }
  double age(std::size_t i) const { return entries_[i].age; }

  // Entry i becomes (key, age); O(log n).
  void set(std::size_t i, double key, double age) {
    const double dKey = key - entries_[i].key;
    const double dAge = age - entries_[i].age;
    entries_[i] = {key, age};
    for (std::size_t node = i + 1; node < nodes_.size(); node += node & (~node + 1)) {
      nodes_[node].key += dKey;
      nodes_[node].age += dAge;
    }
  }

  // Multiplies every key and age by factor and sums the nodes afresh; O(n).
  void rescale(double factor) {
    for (Pair& e : entries_) {
      e.key *= factor;
      e.age *= factor;
    }
    rebuild();
  }

  // Sums every node afresh from the entries (drops accumulated rounding); O(n).
  void rebuild() {
    for (std::size_t node = 1; node < nodes_.size(); ++node)
      nodes_[node] = entries_[node - 1];
    for (std::size_t node = 1; node < nodes_.size(); ++node) {
      const std::size_t parent = node + (node & (~node + 1));
      if (parent < nodes_.size()) {
        nodes_[parent].key += nodes_[node].key;
        nodes_[parent].age += nodes_[node].age;
      }
    }
  }

  // mass_i for the given m and down, clamped at 0 (rounding).
  double mass(std::size_t i, double m, double down) const { return massOf(entries_[i], 1.0, m, down); }

  // The total mass of the n entries; O(log n).
  double total(double m, double down) const {
    double sum = 0.0;
    for (std::size_t node = nodes_.size() - 1; node > 0; node &= node - 1)
      sum += massOf(nodes_[node], static_cast<double>(node & (~node + 1)), m, down);
    return sum;
  }

  // The entry i whose interval [sum of the masses before i, that + mass_i) holds r, for r
  // in [0, total(m, down)); an r at or past the total (rounding) gives the last entry
  // with mass. O(log n).
  std::size_t find(double r, double m, double down) const {
    std::size_t pos = 0;  // entries [0, pos) lie wholly before r
    for (std::size_t step = top_; step > 0; step /= 2) {
      const std::size_t node = pos + step;
      if (node >= nodes_.size()) continue;
      const double here = massOf(nodes_[node], static_cast<double>(step), m, down);
      if (r >= here) {
        r -= here;
        pos = node;
      }
    }
    // pos == n only when r was not below the total: step back to an entry with mass.
    while (pos > 0 && (pos >= entries_.size() || mass(pos, m, down) <= 0.0))
      --pos;
    return pos;
  }

 private:
  struct Pair {
    double key = 0.0;
    double age = 0.0;
  };
  static double massOf(const Pair& p, double count, double m, double down) {
    const double v = m * count + down * (p.key - m * p.age);
    return v > 0.0 ? v : 0.0;
  }

  std::vector<Pair> entries_;
  std::vector<Pair> nodes_;  // 1-based: node k sums entries (k - lowbit(k), k]
  std::size_t top_ = 1;      // the largest power of two <= n
};

}  // namespace starling::client
