"""Install-time settings of the gpubind package.

``make install`` rewrites LIBDIR to the directory libgpuhelper.so.1 was installed in, so that
the package finds the library even where that directory is not on the loader's search path
(PREFIX=/usr/local on a system without /usr/local/lib in ld.so.conf, or a private PREFIX).
In the source tree it is None: the loader's search path (LD_LIBRARY_PATH, ld.so.cache) and
GPUBIND_LIBGPUHELPER decide.
"""

from typing import Optional

LIBDIR: Optional[str] = None
