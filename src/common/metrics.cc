#include "common/metrics.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <map>

#include <fmt/format.h>

namespace weft::metrics {
namespace {

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') { out += "\\n"; continue; }
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

// Inserts an extra label into pre-rendered labels: {a="b"} + le="1" -> {a="b",le="1"}.
std::string with_label(const std::string& labels, const std::string& extra) {
  if (labels.empty()) return "{" + extra + "}";
  return labels.substr(0, labels.size() - 1) + "," + extra + "}";
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

size_t Histogram::bucket_of(uint64_t v) {
  if (v < (1u << kSubBits)) return static_cast<size_t>(v);
  int exp = 63 - std::countl_zero(v);  // v in [2^exp, 2^(exp+1))
  if (exp > kMaxExp) return kBuckets - 1;
  uint64_t sub = (v >> (exp - kSubBits)) & ((1u << kSubBits) - 1);
  return (static_cast<size_t>(exp - kSubBits + 1) << kSubBits) + sub;
}

uint64_t Histogram::bucket_upper(size_t bucket) {
  if (bucket < (1u << kSubBits)) return bucket;
  size_t exp = (bucket >> kSubBits) + kSubBits - 1;
  uint64_t sub = bucket & ((1u << kSubBits) - 1);
  uint64_t base = uint64_t{1} << exp;
  uint64_t step = base >> kSubBits;
  return base + (sub + 1) * step - 1;
}

void Histogram::observe(uint64_t v) {
  buckets_[bucket_of(v)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::array<uint64_t, Histogram::kBuckets> Histogram::snapshot() const {
  std::array<uint64_t, kBuckets> out;
  for (size_t i = 0; i < kBuckets; ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

uint64_t Histogram::quantile(double q) const {
  auto snap = snapshot();
  uint64_t total = 0;
  for (auto c : snap) total += c;
  if (total == 0) return 0;
  auto rank = static_cast<uint64_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(total - 1)) + 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += snap[i];
    if (seen >= rank) return bucket_upper(i);
  }
  return bucket_upper(kBuckets - 1);
}

Registry::Entry* Registry::find_or_add(Kind kind, const std::string& name, const std::string& help,
                                       const Labels& labels) {
  std::string rendered = render_labels(labels);
  std::lock_guard lock(mu_);
  if (auto it = index_.find(Key{kind, name, rendered}); it != index_.end()) return it->second;
  auto e = std::make_unique<Entry>();
  e->kind = kind;
  e->name = name;
  e->help = help;
  e->labels = rendered;
  if (kind == Kind::kCounter) e->counter = std::make_unique<Counter>();
  if (kind == Kind::kGauge) e->gauge = std::make_unique<Gauge>();
  if (kind == Kind::kHistogram) e->histogram = std::make_unique<Histogram>();
  Entry* added = e.get();
  entries_.push_back(std::move(e));
  index_.emplace(Key{kind, added->name, added->labels}, added);
  return added;
}

Counter& Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  return *find_or_add(Kind::kCounter, name, help, labels)->counter;
}

Gauge& Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  return *find_or_add(Kind::kGauge, name, help, labels)->gauge;
}

Histogram& Registry::histogram(const std::string& name, const std::string& help, const Labels& labels) {
  return *find_or_add(Kind::kHistogram, name, help, labels)->histogram;
}

void Registry::gauge_fn(const std::string& name, const std::string& help, const Labels& labels,
                        std::function<double()> fn, const void* owner) {
  auto e = std::make_unique<Entry>();
  e->kind = Kind::kGaugeFn;
  e->name = name;
  e->help = help;
  e->labels = render_labels(labels);
  e->fn = std::move(fn);
  e->owner = owner;
  std::lock_guard lock(mu_);
  entries_.push_back(std::move(e));
}

void Registry::remove_callbacks(const void* owner) {
  std::lock_guard lock(mu_);
  std::erase_if(entries_, [&](const auto& e) { return e->kind == Kind::kGaugeFn && e->owner == owner; });
}

bool Registry::remove(const std::string& name, const Labels& labels) {
  const std::string rendered = render_labels(labels);
  std::lock_guard lock(mu_);
  std::vector<const Entry*> gone;
  for (Kind kind : {Kind::kCounter, Kind::kGauge, Kind::kHistogram}) {
    if (auto it = index_.find(Key{kind, name, rendered}); it != index_.end()) {
      gone.push_back(it->second);
      index_.erase(it);  // before the entry whose strings its key views
    }
  }
  std::erase_if(entries_, [&](const auto& e) { return std::find(gone.begin(), gone.end(), e.get()) != gone.end(); });
  return !gone.empty();
}

size_t Registry::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

std::string Registry::prometheus_text() const {
  std::lock_guard lock(mu_);
  // Group samples by metric name: one HELP/TYPE block per family.
  std::map<std::string, std::vector<const Entry*>> families;
  for (const auto& e : entries_) families[e->name].push_back(e.get());
  std::string out;
  for (const auto& [name, list] : families) {
    const Entry* first = list.front();
    const char* type = first->kind == Kind::kCounter     ? "counter"
                       : first->kind == Kind::kHistogram ? "histogram"
                                                         : "gauge";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, first->help, name, type);
    for (const Entry* e : list) {
      switch (e->kind) {
        case Kind::kCounter: out += fmt::format("{}{} {}\n", name, e->labels, e->counter->value()); break;
        case Kind::kGauge: out += fmt::format("{}{} {}\n", name, e->labels, e->gauge->value()); break;
        case Kind::kGaugeFn: out += fmt::format("{}{} {}\n", name, e->labels, e->fn()); break;
        case Kind::kHistogram: {
          // Export at powers of two only: a compact, fixed bucket set.
          auto snap = e->histogram->snapshot();
          uint64_t cumulative = 0;
          size_t next = 0;
          for (int exp = 0; exp <= Histogram::kMaxExp; ++exp) {
            uint64_t le = (uint64_t{1} << exp) - 1;  // values <= 2^exp - 1
            while (next < Histogram::kBuckets && Histogram::bucket_upper(next) <= le) cumulative += snap[next++];
            if (exp % 2 == 0 || exp == Histogram::kMaxExp)
              out += fmt::format("{}_bucket{} {}\n", name, with_label(e->labels, fmt::format("le=\"{}\"", le)),
                                 cumulative);
          }
          out += fmt::format("{}_bucket{} {}\n", name, with_label(e->labels, "le=\"+Inf\""), e->histogram->count());
          out += fmt::format("{}_sum{} {}\n", name, e->labels, e->histogram->sum());
          out += fmt::format("{}_count{} {}\n", name, e->labels, e->histogram->count());
          break;
        }
      }
    }
  }
  return out;
}

Registry& Registry::global() {
  static auto* r = new Registry();  // never destroyed: metrics outlive static destructors
  return *r;
}

ScopedLatency::ScopedLatency(Histogram& h) : h_(h), start_ns_(now_ns()) {}
ScopedLatency::~ScopedLatency() { h_.observe(static_cast<uint64_t>((now_ns() - start_ns_) / 1000)); }

}  // namespace weft::metrics
