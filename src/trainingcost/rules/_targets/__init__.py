"""What target propagation (TP), difference target propagation (DTP) and local representation alignment (LRA)
share: their training code (:mod:`.step`, torch) and their step on the executed memory tape (:mod:`.tape`, no
torch). The name starts with ``_``, so the catalogue's discovery, which reads every folder of ``rules/`` as a
rule, passes it by; this file imports nothing, so the tape programs load without torch.
"""
