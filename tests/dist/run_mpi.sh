#!/usr/bin/env bash
# run_mpi.sh NP COMMAND...: COMMAND under mpirun with NP ranks on this
# machine over loopback TCP (as CI runs the multi-rank tests: as root, on
# fewer cores than ranks: a rank waiting for a message yields its core,
# mpi_yield_when_idle, instead of spinning). Exits 77 (CTest's skip) when
# mpirun is absent.
set -euo pipefail
np=$1; shift
command -v mpirun >/dev/null || { echo "run_mpi.sh: mpirun not found: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np "$np" --oversubscribe --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo \
  --mca mpi_yield_when_idle 1 --mca btl_base_warn_component_unused 0 "$@"
