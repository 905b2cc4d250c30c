# A thin wrapper over CMake (design.md, "Build outputs"). Everything builds in build/
# (sanitizer builds in build-asan/, build-tsan/); missing Debian packages are
# installed first when run as root.
BUILD    ?= build
PREFIX   ?= /usr/local
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
WERROR   ?= OFF

.PHONY: all deps test test-asan test-faults demo install format format-check clean

all: deps
	@cmake -S . -B $(BUILD) -DDLOCK_WERROR=$(WERROR) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

deps:
	@tools/ensure-deps.sh

# The quick tier: unit tests and integration tests against real redis-server processes.
test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The same suite under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: deps
	@$(MAKE) --no-print-directory test BUILD=build-asan \
	  CMAKE_FLAGS="-DDLOCK_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)"

# A short showcase on a redis-server of its own (the flash-sale demo replaces it).
demo: all
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
	rm -rf build build-asan build-tsan
