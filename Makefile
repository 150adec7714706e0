# Weft top-level targets. `make` builds (release preset), `make test`
# installs dependencies, builds and runs every test (unit, integration and a
# bounded fuzz run), `make bench` runs the micro-benchmarks.
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 30

# ccache hits across clones in different folders (CI builds a fresh clone).
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
export CCACHE_MAXSIZE ?= 5G
# Lets ccache cache translation units built with precompiled headers.
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime

.PHONY: all build deps configure test unit-test fuzz bench format clean

all: build

deps:
	bash scripts/install-deps.sh

configure:
	@if [ ! -f $(BUILD)/build.ninja ]; then cmake --preset $(PRESET); fi

build: configure
	cmake --build $(BUILD) -j$(JOBS)

unit-test: build
	ctest --test-dir $(BUILD) --output-on-failure --timeout 600

test: deps
	$(MAKE) build
	$(MAKE) fuzz
	$(MAKE) unit-test

# libFuzzer needs clang; only the frame decoder and CRC32C are compiled (they avoid <expected>).
FUZZ_BUILD := build/fuzz
fuzz:
	mkdir -p $(FUZZ_BUILD) $(FUZZ_BUILD)/corpus
	clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Isrc \
	  fuzz/frame_fuzz.cc src/rpc/frame.cc src/common/crc32c.cc -lisal -o $(FUZZ_BUILD)/frame_fuzz
	cp -n fuzz/corpus/frame/* $(FUZZ_BUILD)/corpus/ 2>/dev/null || true
	@$(FUZZ_BUILD)/frame_fuzz -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus > $(FUZZ_BUILD)/fuzz.log 2>&1; \
	  rc=$$?; tail -n 8 $(FUZZ_BUILD)/fuzz.log; \
	  if [ $$rc -ne 0 ]; then echo "fuzz: FAILED (see $(FUZZ_BUILD)/fuzz.log)"; exit $$rc; fi
	@echo "fuzz: frame decoder ran $(FUZZ_SECONDS)s without a crash"

bench: build
	bash scripts/run-benchmarks.sh $(BUILD)

# A local cluster, every workload (--quick) against it and a plain directory,
# a table and an HTML report (scripts/demo.sh; `weft down` even on failure).
.PHONY: demo
demo:
	bash scripts/demo.sh

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build
