from admission.cli import main

main()
