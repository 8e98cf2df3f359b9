#pragma once
// What the cascade runner reduces across ranks in a data-parallel step, over any
// Communicator (each part has a header of its own):
//   global_normalizer.hpp              global_loss_counts, global_normalizer: the step's
//                                      divisors (exact: integers)
//   global_metrics.hpp                 global_metrics (policy-loss metrics summed over
//                                      ranks), summarize_across_ranks (one scalar)
//   sequences_across_ranks.hpp         values of sequences spread over ranks (e.g.
//                                      rewards of groups split by the sharding), and a
//                                      whole-batch algorithm run on them
//   group_statistics_across_ranks.hpp  group statistics of groups spread over ranks
//   comm/collectives.hpp               all_reduce_value, all_gather_varying,
//                                      broadcast_vector (transport, no meaning attached)
//
// Exactness. Integer counts are summed exactly, so the normaliser, and with it every
// token's dL/dlogp, is bit for bit the single-process one. Group statistics need the
// rewards of a whole group in one fixed order: sequences_across_ranks gathers them (a
// reward per sequence is small) and every rank runs the single-process algorithm on
// the whole batch, so advantages are also bit for bit. Floating-point sums across
// ranks (a loss, approx_kl_sum) are exact up to the reduction order MPI or NCCL picks.

#include "cascade_rl/comm/collectives.hpp"
#include "cascade_rl/distributed/global_metrics.hpp"
#include "cascade_rl/distributed/global_normalizer.hpp"
#include "cascade_rl/distributed/group_statistics_across_ranks.hpp"
#include "cascade_rl/distributed/sequences_across_ranks.hpp"
