#pragma once
// MOPD's token advantage a_t = log pi_teacher(y_t) - log pi_student(y_t), 0 on a masked
// token (algorithms/distillation_advantages.hpp says where it comes from). The
// subtraction is in T, as the host, the portable path and the kernel all write it.

#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::terms {

template <class T>
CASCADE_RL_HD inline T distillation_advantage(T teacher, T student, bool valid) {
  return valid ? teacher - student : T(0);
}

}  // namespace cascade_rl::terms
