from planner.native_threads import use_one_native_thread

use_one_native_thread()  # before anything imports numpy (planner/native_threads.py says why)

from admission.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
