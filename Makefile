# Weft top-level targets. `make` builds (release preset), `make test`
# installs dependencies, builds and runs every test (unit, integration and a
# bounded fuzz run), `make bench` runs the micro-benchmarks.
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 20

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

# Decoders of bytes from disk or the network, fuzzed with libFuzzer (clang):
# the RPC frame, meta's store values, a storage target's chunk records,
# mgmtd's persisted state, meta replies and routing off the wire, and the
# config files every server and client reads
# (fuzz/*.cc say what each checks). FUZZ_SECONDS each; corpora in
# fuzz/corpus/NAME. Clang 16 does what libstdc++ 12's <expected> needs but
# does not claim all of C++20 concepts (__cpp_concepts 201907L hides the
# header): the value is raised for these few pure files.
FUZZ_BUILD := build/fuzz
FUZZ_CXX := $(shell command -v ccache >/dev/null 2>&1 && echo ccache) clang++-16
FUZZ_FLAGS := -std=c++2b -D__cpp_concepts=202002L -Wno-macro-redefined -O1 -g -Isrc -Iinclude -I$(BUILD)/src \
  -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_TARGETS := frame meta_codec chunk_meta mgmt_state wire_convert config
fuzz_frame_SRC := src/rpc/frame.cc src/common/crc32c.cc
fuzz_frame_LIBS := -lisal
fuzz_meta_codec_SRC := src/meta/codec.cc src/common/status.cc
fuzz_meta_codec_LIBS := -lfmt
fuzz_chunk_meta_SRC := src/storage/chunk_meta.cc src/common/status.cc src/common/crc32c.cc
fuzz_chunk_meta_LIBS := -lisal -lfmt
fuzz_mgmt_state_SRC := src/mgmt/state_codec.cc src/common/status.cc
fuzz_mgmt_state_LIBS := -lfmt
fuzz_wire_convert_SRC := $(BUILD)/src/proto/meta.pb.cc $(BUILD)/src/proto/mgmt.pb.cc src/meta/proto_convert.cc \
  src/mgmt/proto_convert.cc src/common/status.cc
fuzz_wire_convert_LIBS := -lprotobuf -lfmt
fuzz_config_SRC := src/common/config.cc src/common/status.cc src/client/cluster_config.cc src/rpc/endpoint.cc \
  src/rpc/tcp_liveness.cc src/rpc/local_socket.cc
fuzz_config_LIBS := -lfmt

# Order-only on `build`: it generates the protobuf headers some include.
# -MMD: a changed header rebuilds the objects that include it.
$(FUZZ_BUILD)/obj/%.o: %.cc Makefile | build
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -MMD -MP -fsanitize=fuzzer-no-link -c $< -o $@
-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)

fuzz_objects = $(patsubst %.cc,$(FUZZ_BUILD)/obj/%.o,$(1))
# Kept (not removed as intermediates): a second run compiles nothing.
.SECONDARY: $(foreach t,$(FUZZ_TARGETS),$(call fuzz_objects,$(fuzz_$(t)_SRC)))
.SECONDEXPANSION:
$(FUZZ_BUILD)/%_fuzz: fuzz/%_fuzz.cc $$(call fuzz_objects,$$(fuzz_$$*_SRC))
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer $^ $(fuzz_$*_LIBS) -o $@

fuzz: build $(patsubst %,$(FUZZ_BUILD)/%_fuzz,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; cp -n fuzz/corpus/$$t/* $(FUZZ_BUILD)/corpus/$$t/ 2>/dev/null; \
	  $(FUZZ_BUILD)/$${t}_fuzz -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/$$t- $(FUZZ_BUILD)/corpus/$$t > $(FUZZ_BUILD)/$$t.log 2>&1; \
	  rc=$$?; \
	  if [ $$rc -ne 0 ]; then tail -n 30 $(FUZZ_BUILD)/$$t.log; echo "fuzz: $$t FAILED (see $(FUZZ_BUILD)/$$t.log)"; exit $$rc; fi; \
	  echo "fuzz: $$t ran $(FUZZ_SECONDS)s without a finding ($$(grep -o 'number_of_executed_units: *[0-9]*' $(FUZZ_BUILD)/$$t.log | grep -o '[0-9]*$$') inputs)"; \
	done

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
