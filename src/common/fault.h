// common/fault.h
// Named fault-injection points. Code marks a place where a failure can be
// simulated:
//   if (WEFT_FAULT("chain.forward.drop_ack")) co_return error(Code::kTimeout, "injected");
// Tests switch points on with FaultScope; multi-process tests pass
// WEFT_FAULTS="name[=probability[:hits_max[:skip]]],..." in the environment of
// the process under test (read by load_faults_from_env at start).
// With WEFT_FAULT_INJECTION off, WEFT_FAULT(...) is the constant false.
// Cost when no point is armed: one relaxed atomic load. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace weft::fault {

struct Spec {
  double probability = 1.0;  // chance that an eligible hit triggers
  int64_t hits_max = -1;     // triggers at most this often; -1 = unlimited
  int64_t skip = 0;          // the first `skip` evaluations never trigger
};

bool any_armed();
bool hit(std::string_view name);  // slow path; use WEFT_FAULT

void arm(std::string name, Spec spec);
void disarm(std::string_view name);
void disarm_all();
// How often the point triggered since it was armed.
int64_t triggered(std::string_view name);

// Parses WEFT_FAULTS; returns an error message for a malformed value, "" if fine.
std::string load_from_env();
std::string parse_and_arm(std::string_view text);

class Scope {
 public:
  Scope(std::string name, Spec spec = {});
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  int64_t triggered() const { return fault::triggered(name_); }

 private:
  std::string name_;
};

}  // namespace weft::fault

#if defined(WEFT_FAULT_INJECTION) && WEFT_FAULT_INJECTION
#define WEFT_FAULT(name) (::weft::fault::any_armed() && ::weft::fault::hit(name))
#else
#define WEFT_FAULT(name) false
#endif
