#include "common/fault.h"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>

#include "common/random.h"

namespace weft::fault {
namespace {

struct Point {
  Spec spec;
  int64_t evaluations = 0;
  int64_t triggered = 0;
};

std::atomic<int> g_armed{0};
std::mutex g_mu;
std::map<std::string, Point, std::less<>>& points() {
  static auto* p = new std::map<std::string, Point, std::less<>>();  // never destroyed
  return *p;
}

}  // namespace

bool any_armed() { return g_armed.load(std::memory_order_relaxed) != 0; }

bool hit(std::string_view name) {
  std::lock_guard lock(g_mu);
  auto it = points().find(name);
  if (it == points().end()) return false;
  Point& p = it->second;
  if (p.evaluations++ < p.spec.skip) return false;
  if (p.spec.hits_max >= 0 && p.triggered >= p.spec.hits_max) return false;
  if (p.spec.probability < 1.0) {
    double u = static_cast<double>(thread_random().next_u64() >> 11) * 0x1.0p-53;
    if (u >= p.spec.probability) return false;
  }
  ++p.triggered;
  return true;
}

void arm(std::string name, Spec spec) {
  std::lock_guard lock(g_mu);
  points()[std::move(name)] = Point{spec};
  g_armed.store(static_cast<int>(points().size()), std::memory_order_relaxed);
}

void disarm(std::string_view name) {
  std::lock_guard lock(g_mu);
  auto it = points().find(name);
  if (it != points().end()) points().erase(it);
  g_armed.store(static_cast<int>(points().size()), std::memory_order_relaxed);
}

void disarm_all() {
  std::lock_guard lock(g_mu);
  points().clear();
  g_armed.store(0, std::memory_order_relaxed);
}

int64_t triggered(std::string_view name) {
  std::lock_guard lock(g_mu);
  auto it = points().find(name);
  return it == points().end() ? 0 : it->second.triggered;
}

std::string parse_and_arm(std::string_view text) {
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    Spec spec;
    size_t eq = item.find('=');
    std::string name(item.substr(0, eq));
    if (name.empty()) return "WEFT_FAULTS: empty fault name";
    if (eq != std::string_view::npos) {
      std::string_view rest = item.substr(eq + 1);
      std::string_view fields[3];
      for (auto& f : fields) {
        size_t colon = rest.find(':');
        f = rest.substr(0, colon);
        rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
      }
      char* end = nullptr;
      std::string prob(fields[0]);
      spec.probability = std::strtod(prob.c_str(), &end);
      if (prob.empty() || *end != '\0' || spec.probability < 0 || spec.probability > 1)
        return "WEFT_FAULTS: bad probability for " + name + " (expected 0..1)";
      auto parse_int = [](std::string_view s, int64_t& out) {
        if (s.empty()) return true;
        auto r = std::from_chars(s.data(), s.data() + s.size(), out);
        return r.ec == std::errc() && r.ptr == s.data() + s.size();
      };
      if (!parse_int(fields[1], spec.hits_max)) return "WEFT_FAULTS: bad hits_max for " + name;
      if (!parse_int(fields[2], spec.skip)) return "WEFT_FAULTS: bad skip for " + name;
    }
    arm(std::move(name), spec);
  }
  return "";
}

std::string load_from_env() {
  const char* value = std::getenv("WEFT_FAULTS");
  if (value == nullptr) return "";
  return parse_and_arm(value);
}

Scope::Scope(std::string name, Spec spec) : name_(std::move(name)) { arm(name_, spec); }
Scope::~Scope() { disarm(name_); }

}  // namespace weft::fault
