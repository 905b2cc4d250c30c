# A thin wrapper over CMake. Everything builds in build/
# (sanitizer builds in build-asan/, build-tsan/); missing Debian packages are
# installed first when run as root (tools/ensure-deps.sh: the build's alone for `make`,
# the test harness's too for the test targets).
BUILD    ?= build
PREFIX   ?= /usr/local
DESTDIR  ?=
CMAKE_FLAGS ?=
WERROR   ?= OFF
# Parallel jobs: JOBS=N, else make's own -jN, else one a core.
JOBS     ?=
jobs = $(or $(JOBS),$(patsubst -j%,%,$(filter -j%,$(MAKEFLAGS))),$(shell nproc 2>/dev/null || echo 2))

# configure,TESTS: CMake in $(BUILD), with the tests (ON) or without them (OFF).
configure = cmake -S . -B $(BUILD) -DDLOCK_WERROR=$(WERROR) -DDLOCK_TESTS=$(1) \
  -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
# The build's make gets its -j from here, not the jobserver of this one, which it could
# not join (this rule is no recursive make).
build = env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL cmake --build $(BUILD) -j $(jobs)

.PHONY: all deps tests test test-asan test-tsan test-valgrind test-faults soak fuzz model demo \
  install deb format format-check check-layers clean

# The library, dlock, dlockd, dlock-bench and the examples; no test.
all: deps
	@$(call configure,OFF)
	@$(build)

deps:
	@tools/ensure-deps.sh build

# Every test built, none run: the test harness's packages first.
tests:
	@tools/ensure-deps.sh test
	@$(call configure,ON)
	@$(build)

# The quick tier: unit and integration tests against real redis-server processes, and
# the fault suite's quick scenarios (label "slow" and "soak" are left out).
test: tests
	cd $(BUILD) && ctest --output-on-failure -j $(jobs) -LE 'slow|soak'

# The whole fault-injection suite (tests/faults, docs/testing.md), quick and slow.
test-faults: tests
	cd $(BUILD) && ctest --output-on-failure -j $(jobs) -L faults

# The composed soaks, one after the other: the library's (every fault kind at once),
# then dlockd's (hundreds of clients over two dlockds, bursts, half-closes, resets,
# pre-AUTH floods, lock-server pauses), 10 minutes each (DLOCK_SOAK_SECONDS sets both;
# CI runs 120 s). A failure's log starts with the seed: DLOCK_TEST_SEED repeats it.
soak: tests
	cd $(BUILD) && ctest --output-on-failure -L soak

# The same suite under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan \
	  CMAKE_FLAGS="-DDLOCK_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)"

# The same suite under ThreadSanitizer. Liveness bounds get DLOCK_TEST_SLACK=10
# (docs/testing.md): TSan slows everything down, safety assertions stay exact.
test-tsan:
	@$(MAKE) --no-print-directory tests BUILD=build-tsan \
	  CMAKE_FLAGS="-DDLOCK_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)"
	cd build-tsan && DLOCK_TEST_SLACK=10 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(jobs) -E 'bench_quick|demo_quick' -LE 'slow|soak'

# The libFuzzer targets (fuzz/: URL and duration parsers, the reply reader, the lock
# calls against a scripted server), built with clang in build-fuzz/: each runs over its
# seed corpus, then fuzzes for FUZZ_SECONDS. A crash is saved in fuzz/crashes/.
FUZZ_SECONDS ?= 60
fuzz: deps
	DLOCK_FUZZ_BUILD=build-fuzz WERROR=$(WERROR) tools/fuzz.sh $(FUZZ_SECONDS)

# The Spin model of acquire, release and fences (model/fencing.pml, docs/testing.md):
# an exhaustive search for small bounds that must find no error, and the same model
# without the TIME floor, whose search must find fences going back. In build-model/.
model:
	@tools/ensure-deps.sh model
	@model/run.sh build-model

# The quick tier under valgrind's memcheck (each test executable run by valgrind; a
# memory error or a definite leak fails the test). Liveness bounds get slack 10.
VALGRIND_CMD = valgrind;--error-exitcode=99;--leak-check=full;--errors-for-leak-kinds=definite;--show-leak-kinds=definite;--quiet
test-valgrind:
	@tools/ensure-deps.sh valgrind
	@$(MAKE) --no-print-directory tests BUILD=build-valgrind \
	  CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug '-DDLOCK_TEST_LAUNCHER=$(VALGRIND_CMD)' $(CMAKE_FLAGS)"
	cd build-valgrind && DLOCK_TEST_SLACK=10 \
	  ctest --output-on-failure -j $(jobs) -E 'bench_quick|demo_quick' -LE 'slow|soak'

# The flash sale, a node killed mid-run, a stale holder fenced off, a buyer killed
# holding reservations, PHP buyers through dlockd with one killed holding the lock:
# tools/demo.sh, on redis-server processes it starts itself. The build's output is shown only if it fails.
demo:
	@tools/ensure-deps.sh build demo
	@mkdir -p $(BUILD) && echo "building (log: $(BUILD)/demo-build.log)..."
	@$(MAKE) --no-print-directory all >$(BUILD)/demo-build.log 2>&1 || \
	  { cat $(BUILD)/demo-build.log; exit 1; }
	@tools/demo.sh $(BUILD)

# Binaries that run where they are installed: an install RPATH of $ORIGIN/../LIBDIR
# outside the system's library directories (CMakeLists.txt). DESTDIR stages the tree.
# Installed into the system (no DESTDIR) as root, the dynamic linker's cache is
# refreshed, as a package's install does: else a program of the user's own, linked with
# -ldlock, would not find libdlock.so.0 under /usr/local/lib until the next ldconfig.
# (dlock and dlockd find it anyway: their runpath names PREFIX/lib.)
install: all
	DESTDIR=$(DESTDIR) cmake --install $(BUILD) --prefix $(PREFIX)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then \
	  ldconfig; \
	fi

# Debian packages in build/deb/ (debhelper over debian/, lintian after): tools/deb.sh.
deb:
	@tools/deb.sh $(BUILD)/deb

# The layers of src/ (the map in src/internal.h): no file includes a header of a higher
# layer, or calls a function of one (read off the objects' symbols).
check-layers: all
	@tools/check-layers.sh src $(BUILD)/src/CMakeFiles/dlock_objects.dir

format:
	@tools/ensure-deps.sh format
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	@tools/ensure-deps.sh format
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-tsan build-valgrind build-fuzz build-model
