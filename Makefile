# Nereus build. `make` builds the tools and libnereus; `make check` runs every
# test; `make demo` runs the shipped example; `make bench` prints the numbers.
# Both `demo` and `check` first make sure the Debian packages are there.

PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCDIR   ?= $(PREFIX)/include
MANPREFIX ?= $(PREFIX)/share/man
DATADIR  ?= $(PREFIX)/share
DESTDIR  ?=
VERSION  := 0.1.0

CC       ?= cc
MPICC    ?= mpicc
O        ?= build
CFLAGS   ?= -O2 -g
WARN     := -Wall -Wextra -Wpedantic -Wstrict-prototypes -Wvla -Wwrite-strings \
            -Wformat-security
ifdef WERROR
WARN     += -Werror
endif
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
CPPFLAGS += -std=c11 -D_GNU_SOURCE -Ilib -DNEREUS_VERSION='"$(VERSION)"' $(BLAS_CFLAGS)
LDLIBS   += -ljansson -larchive -lxxhash $(BLAS_LIBS) -lm -lpthread
ifdef SANITIZE
CFLAGS   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SANITIZE)
endif

# CUDA parts build whenever nvcc is found; nothing else needs them.
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })

# lib/mpi (built with mpicc, linked into the tools that carry ranks) and
# lib/cuda (libnereus-cuda.so, below) stay out of libnereus.a, and so do
# their headers out of the installed ones.
LIB_SRC  := $(sort $(shell find lib -name '*.c' -not -path 'lib/mpi/*' -not -path 'lib/cuda/*'))
LIB_HDR  := $(sort $(shell find lib -name '*.h' -not -path 'lib/mpi/*' -not -path 'lib/cuda/*'))
# what make install copies: a folder's private headers (*_impl.h) stay here
PUB_HDR  := $(filter-out %_impl.h,$(LIB_HDR))
MPI_SRC  := $(sort $(wildcard lib/mpi/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(O)/%.o)
MPI_OBJ  := $(MPI_SRC:%.c=$(O)/%.o)
CMD_COMMON := $(O)/cmd/common.o
TOOLS    := $(patsubst cmd/%.c,%,$(filter-out cmd/common.c,$(wildcard cmd/nereus-*.c)))
# Tools that carry MPI ranks link with mpicc.
MPI_TOOLS ?= $(filter $(TOOLS),nereus-profile nereus-transition nereus-run)
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNITS    := $(UNIT_SRC:tests/unit/%.c=$(O)/tests/%)
BENCH_SRC := $(sort $(wildcard tests/bench/bench_*.c))
BENCHES  := $(BENCH_SRC:tests/bench/%.c=$(O)/tests/%)
# Probes: small programs the bats tests drive (JSON in, JSON out).
PROBE_SRC := $(sort $(wildcard tests/probe/*.c))
PROBES   := $(PROBE_SRC:tests/probe/%.c=$(O)/tests/%)

all: $(TOOLS:%=$(O)/%) $(O)/libnereus.a

$(O)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -MMD -MP -c $< -o $@

$(MPI_OBJ): $(O)/%.o: %.c
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(WARN) -MMD -MP -c $< -o $@

$(O)/libnereus.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(MPI_TOOLS:%=$(O)/%): $(MPI_OBJ)

# A tool's subcommands beside its main, git-builtin style: cmd/TOOL/*.c.
sub_obj = $(patsubst %.c,$(O)/%.o,$(wildcard cmd/$(1)/*.c))
$(foreach t,$(TOOLS),$(eval $(O)/$(t): $(call sub_obj,$(t))))

$(O)/nereus-%: $(O)/cmd/nereus-%.o $(CMD_COMMON) $(O)/libnereus.a
	$(if $(filter nereus-$*,$(MPI_TOOLS)),$(MPICC),$(CC)) $(LDFLAGS) -o $@ $< $(CMD_COMMON) \
	  $(call sub_obj,nereus-$*) $(if $(filter nereus-$*,$(MPI_TOOLS)),$(MPI_OBJ)) \
	  $(O)/libnereus.a $(LDLIBS)

$(O)/tests/%: tests/unit/%.c tests/unit/unit.h $(O)/libnereus.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Itests/unit $(CFLAGS) $(WARN) $(LDFLAGS) -o $@ $< $(O)/libnereus.a $(LDLIBS)

$(O)/tests/bench_%: tests/bench/bench_%.c $(O)/libnereus.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(LDFLAGS) -o $@ $< $(O)/libnereus.a $(LDLIBS)

$(O)/tests/%: tests/probe/%.c $(wildcard tests/probe/*.h) $(O)/libnereus.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(LDFLAGS) -o $@ $< $(O)/libnereus.a $(LDLIBS)

# Unit tests of lib/mpi (tests/unit/test_mpi_*.c) and probes that run as
# MPI ranks (tests/probe/mpi_*.c) link lib/mpi, with mpicc; mpicc compiles
# with $(CC) for them, so that a sanitizer build's objects agree.
UNITS_MPI  := $(filter $(O)/tests/test_mpi_%,$(UNITS))
PROBES_MPI := $(filter $(O)/tests/mpi_%,$(PROBES))
$(UNITS_MPI) $(PROBES_MPI): export OMPI_CC = $(CC)

$(UNITS_MPI): $(O)/tests/%: tests/unit/%.c tests/unit/unit.h $(MPI_OBJ) $(O)/libnereus.a
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) -Itests/unit $(CFLAGS) $(WARN) $(LDFLAGS) -o $@ $< $(MPI_OBJ) \
	  $(O)/libnereus.a $(LDLIBS)

$(PROBES_MPI): $(O)/tests/%: tests/probe/%.c $(MPI_OBJ) $(O)/libnereus.a
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(LDFLAGS) -o $@ $< $(MPI_OBJ) $(O)/libnereus.a $(LDLIBS)

deps:
	@scripts/install-deps.sh

# lib/ runs one way (scripts/check-layers.sh says which), and every name
# libnereus.a exports has its module's prefix (scripts/check-exports.sh).
layers:
	@scripts/check-layers.sh
	@$(MAKE) --no-print-directory WERROR=1 $(O)/libnereus.a
	@scripts/check-exports.sh $(O)/libnereus.a

unit: $(UNITS)
	@scripts/run-units.sh $(UNITS)

bats: all $(PROBES)
	@NEREUS_BUILD=$(CURDIR)/$(O) bats tests/

SAN_CC ?= $(shell command -v clang >/dev/null 2>&1 && echo clang || echo $(CC))
sanitize:
	@$(MAKE) --no-print-directory O=build-san SANITIZE=address,undefined CC=$(SAN_CC) unit

# CI's gate: warnings are errors, gcc for the tools, clang for the
# sanitizer build, so both compilers stay warning-free.
check: deps layers
	@$(MAKE) --no-print-directory WERROR=1 all
	@$(MAKE) --no-print-directory WERROR=1 unit
	@$(MAKE) --no-print-directory WERROR=1 bats
	@$(MAKE) --no-print-directory WERROR=1 sanitize

demo: deps
	@$(MAKE) --no-print-directory all
	@NEREUS_BUILD=$(CURDIR)/$(O) examples/demo.sh

bench: all $(BENCHES)
	@NEREUS_BUILD=$(CURDIR)/$(O) scripts/run-bench.sh $(BENCHES) tests/bench/bench_ranks.sh \
	  tests/bench/bench_refit.sh \
	  tests/bench/bench_compare.sh

# Man pages are written in scdoc; the generated roff is committed so a build
# needs no converter. `make man` regenerates it.
MAN_SCD := $(wildcard man/man*/*.scd)
man: $(MAN_SCD:.scd=)
man/%: man/%.scd scripts/scdoc-tidy.awk
	scdoc < $< > $@.raw || { rm -f $@.raw; exit 1; }
	awk -f scripts/scdoc-tidy.awk $@.raw > $@
	rm -f $@.raw

# nereus.pc is written here, from the PREFIX, LIBDIR and INCDIR of this
# very call, so it names where the library goes.  The headers are those of
# what libnereus.a holds.  zsh looks in site-functions under /usr/local
# (vendor-completions is Debian's own, for /usr).
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR)/nereus \
	  $(DESTDIR)$(MANPREFIX)/man1 $(DESTDIR)$(MANPREFIX)/man5 $(DESTDIR)$(MANPREFIX)/man7 \
	  $(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/site-functions
	install -m 755 $(TOOLS:%=$(O)/%) $(DESTDIR)$(BINDIR)
	install -m 644 $(O)/libnereus.a $(DESTDIR)$(LIBDIR)
	$(if $(CUDA_SO),install -m 755 $(CUDA_SO) $(DESTDIR)$(LIBDIR))
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' nereus.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/nereus.pc
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/nereus.pc
	for h in $(PUB_HDR:lib/%=%); do install -D -m 644 lib/$$h $(DESTDIR)$(INCDIR)/nereus/$$h || exit 1; done
	install -m 644 $(wildcard man/man1/*.1) $(DESTDIR)$(MANPREFIX)/man1
	install -m 644 $(wildcard man/man5/*.5) $(DESTDIR)$(MANPREFIX)/man5
	install -m 644 $(wildcard man/man7/*.7) $(DESTDIR)$(MANPREFIX)/man7
	install -m 644 $(wildcard completions/bash/*) $(DESTDIR)$(DATADIR)/bash-completion/completions
	install -m 644 $(wildcard completions/zsh/*) $(DESTDIR)$(DATADIR)/zsh/site-functions

clean:
	rm -rf $(O) build-san

.PHONY: all deps unit bats sanitize check layers demo bench man install clean FORCE
.SECONDARY:

-include $(shell find $(O) -name '*.d' 2>/dev/null)

# libFuzzer targets (clang): `make fuzz FUZZ_SECONDS=600` runs each.
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SECONDS ?= 60
fuzz:
	@mkdir -p $(O)/fuzz
	@for f in $(FUZZ_SRC); do \
	  b=$(O)/fuzz/$$(basename $$f .c); \
	  clang $(CPPFLAGS) -g -O1 -fsanitize=fuzzer,address,undefined $(WARN) \
	    -o $$b $$f $(LIB_SRC) $(LDLIBS) || exit 1; \
	  mkdir -p $(O)/fuzz/corpus-$$(basename $$f .c); \
	  $$b -max_total_time=$(FUZZ_SECONDS) $(O)/fuzz/corpus-$$(basename $$f .c) \
	    $$(test -d tests/fuzz/seeds/$$(basename $$f .c) && echo tests/fuzz/seeds/$$(basename $$f .c)) || exit 1; \
	done
.PHONY: fuzz

# --- CUDA begin
# With nvcc found, lib/cuda/*.cu is built into libnereus-cuda.so, which
# links the CUDA runtime, cuBLAS and, when nccl.h and libnccl are found in
# NCCL_HOME or next to CUDA's own headers and libraries, NCCL
# (-DNEREUS_NCCL).  No tool links it: nereus-profile (bench's GPU figures)
# and nereus-transition (live --nccl) are built with -DNEREUS_CUDA and
# load it through lib/cuda/cudalib.c only when they take a GPU path, so
# that they run without the CUDA runtime otherwise.  They export their
# libnereus to it (-rdynamic: it calls err_set, live_run, ...) and find it
# by their run path: their own directory (the build directory), then the
# library directory as seen from BINDIR.  That path is part of their link,
# so a change of BINDIR or LIBDIR relinks them.
ifneq ($(NVCC),)
NVCCFLAGS ?= -O2 -g
nr_comma  := ,
NCCL_INC  := $(firstword $(foreach d,$(NCCL_HOME)/include $(CUDA_HOME)/include,\
               $(if $(wildcard $(d)/nccl.h),$(d))))
NCCL_LIB  := $(firstword $(foreach d,$(NCCL_HOME)/lib $(NCCL_HOME)/lib64 $(CUDA_HOME)/lib64 \
               $(CUDA_HOME)/lib,$(if $(wildcard $(d)/libnccl.so*),$(d))))
CUDA_SRC  := $(sort $(wildcard lib/cuda/*.cu))
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(O)/%.o)
CUDA_SO   := $(O)/libnereus-cuda.so
CUDA_DEFS := -DNEREUS_CUDA $(if $(and $(NCCL_INC),$(NCCL_LIB)),-DNEREUS_NCCL)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart \
             $(if $(and $(NCCL_INC),$(NCCL_LIB)),-L$(NCCL_LIB) -Wl$(nr_comma)-rpath$(nr_comma)$(NCCL_LIB) -lnccl) \
             -lstdc++
CUDA_TOOLS := $(filter $(TOOLS),nereus-profile nereus-transition)
BIN_TO_LIB := $(shell realpath -m --relative-to='$(BINDIR)' '$(LIBDIR)')

all: $(CUDA_SO)

$(CUDA_OBJ): $(O)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -std=c++17 -Ilib $(CUDA_DEFS) $(if $(NCCL_INC),-I$(NCCL_INC)) \
	  -Xcompiler -fPIC,-Wall,-Wextra -MMD -MP -c $< -o $@

$(CUDA_SO): $(CUDA_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(CUDA_LIBS)

$(O)/cuda-rpath: FORCE
	@mkdir -p $(@D)
	@echo '$(BIN_TO_LIB)' | cmp -s - $@ || echo '$(BIN_TO_LIB)' > $@

$(O)/cmd/nereus-profile/bench.o: CPPFLAGS += -DNEREUS_CUDA
$(O)/cmd/nereus-transition/live.o: CPPFLAGS += $(CUDA_DEFS)
$(CUDA_TOOLS:%=$(O)/%): $(O)/lib/cuda/cudalib.o $(O)/cuda-rpath
$(CUDA_TOOLS:%=$(O)/%): LDFLAGS += -rdynamic -Wl,-rpath,'$$ORIGIN:$$ORIGIN/$(BIN_TO_LIB)' \
                                   $(O)/lib/cuda/cudalib.o
endif
# --- CUDA end
