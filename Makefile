# A thin wrapper over CMake. Everything builds in build/
# (sanitizer builds in build-asan/, build-tsan/); missing Debian packages are
# installed first when run as root.
BUILD    ?= build
PREFIX   ?= /usr/local
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
WERROR   ?= OFF

.PHONY: all deps test test-asan test-tsan test-valgrind test-faults soak fuzz model demo install format format-check clean

all: deps
	@cmake -S . -B $(BUILD) -DDLOCK_WERROR=$(WERROR) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

deps:
	@tools/ensure-deps.sh

# The quick tier: unit and integration tests against real redis-server processes, and
# the fault suite's quick scenarios (label "slow" and "soak" are left out).
test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE 'slow|soak'

# The whole fault-injection suite (tests/faults, docs/testing.md), quick and slow.
test-faults: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L faults

# The composed soak: every fault kind at once, 10 minutes (DLOCK_SOAK_SECONDS sets it;
# CI runs 120 s). A failure's log starts with the seed: DLOCK_TEST_SEED repeats it.
soak: all
	cd $(BUILD) && ctest --output-on-failure -L soak

# The same suite under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: deps
	@$(MAKE) --no-print-directory test BUILD=build-asan \
	  CMAKE_FLAGS="-DDLOCK_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)"

# The same suite under ThreadSanitizer. Liveness bounds get DLOCK_TEST_SLACK=10
# (docs/testing.md): TSan slows everything down, safety assertions stay exact.
test-tsan: deps
	@$(MAKE) --no-print-directory all BUILD=build-tsan \
	  CMAKE_FLAGS="-DDLOCK_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)"
	cd build-tsan && DLOCK_TEST_SLACK=10 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(JOBS) -E 'bench_quick|demo_quick' -LE 'slow|soak'

# The libFuzzer targets (fuzz/: URL and duration parsers, the reply reader, the lock
# calls against a scripted server), built with clang in build-fuzz/: each runs over its
# seed corpus, then fuzzes for FUZZ_SECONDS. A crash is saved in fuzz/crashes/.
FUZZ_SECONDS ?= 60
fuzz: deps
	DLOCK_FUZZ_BUILD=build-fuzz WERROR=$(WERROR) tools/fuzz.sh $(FUZZ_SECONDS)

# The Spin model of acquire, release and fences (model/fencing.pml, docs/testing.md):
# an exhaustive search for small bounds that must find no error, and the same model
# without the TIME floor, whose search must find fences going back. In build-model/.
model: deps
	@model/run.sh build-model

# The quick tier under valgrind's memcheck (each test executable run by valgrind; a
# memory error or a definite leak fails the test). Liveness bounds get slack 10.
VALGRIND_CMD = valgrind;--error-exitcode=99;--leak-check=full;--errors-for-leak-kinds=definite;--show-leak-kinds=definite;--quiet
test-valgrind:
	@tools/ensure-deps.sh valgrind
	@$(MAKE) --no-print-directory all BUILD=build-valgrind \
	  CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug '-DDLOCK_TEST_LAUNCHER=$(VALGRIND_CMD)' $(CMAKE_FLAGS)"
	cd build-valgrind && DLOCK_TEST_SLACK=10 \
	  ctest --output-on-failure -j $(JOBS) -E 'bench_quick|demo_quick' -LE 'slow|soak'

# The flash sale, a node killed mid-run, a stale holder fenced off, a buyer killed
# holding reservations, PHP buyers through dlockd with one killed holding the lock:
# tools/demo.sh, on redis-server processes it starts itself. The build's output is shown only if it fails.
demo: deps
	@mkdir -p $(BUILD) && echo "building (log: $(BUILD)/demo-build.log)..."
	@$(MAKE) --no-print-directory all >$(BUILD)/demo-build.log 2>&1 || \
	  { cat $(BUILD)/demo-build.log; exit 1; }
	@tools/demo.sh $(BUILD)

install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	@tools/ensure-deps.sh format
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	@tools/ensure-deps.sh format
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-tsan build-valgrind build-fuzz build-model
