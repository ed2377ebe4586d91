from nnbuild.cli import main

raise SystemExit(main())
