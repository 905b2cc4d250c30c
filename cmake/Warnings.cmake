# The warnings every target of ours is built with, for gcc 12 and clang 14. They catch
# what C11 lets through silently (shadowed names, functions without prototypes, casts
# that drop const, format strings that cannot be checked); CI builds with DLOCK_WERROR,
# so that none of them lands.
set(DLOCK_WARNINGS
  -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -Wold-style-definition -Wwrite-strings -Wcast-qual -Wformat=2 -Wundef)
if(DLOCK_WERROR)
  list(APPEND DLOCK_WARNINGS -Werror)
endif()

# dlock_warnings(target): apply them to one of our own targets.
function(dlock_warnings target)
  target_compile_options(${target} PRIVATE ${DLOCK_WARNINGS})
endfunction()
