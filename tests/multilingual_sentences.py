"""Hand-made sentences per script for the tokenisation tests (tests/test_analysis_scripts.py) and
benchmarks/word_segmentation.py. Written for these tests, not downloaded. The scripts with spaces between words
list each sentence's words as a reader separates them (punctuation dropped); the tests check that each of
those words is exactly one term."""

from __future__ import annotations

import unicodedata

# language -> sentences
SENTENCES: dict[str, list[str]] = {
    # Devanagari: vowel signs (ै ं ी ु ा), viramas (्) and nukta (ढ़) inside words; danda (।) ends a sentence
    "hi": [
        "पैंथर्स की रक्षा पंक्ति ने केवल 308 अंक दिए।",
        "भारत की राजधानी नई दिल्ली है।",
        "विद्यार्थियों ने पुस्तकालय में किताबें पढ़ीं।",
    ],
    # Bengali: vowel signs, virama conjuncts (ক্ষ, ন্ত্র), the khanda ta (ৎ)
    "bn": [
        "বাংলা ভাষা দক্ষিণ এশিয়ার একটি প্রধান ভাষা।",
        "শিক্ষার্থীরা গ্রন্থাগারে বই পড়ছে।",
        "উৎসবের সময় মানুষ নতুন পোশাক পরে।",
    ],
    # Tamil: pulli (்) ends many words; vowel signs on both sides of the consonant (ொ, ோ)
    "ta": [
        "தமிழ் மொழி உலகின் பழமையான மொழிகளில் ஒன்று.",
        "மாணவர்கள் நூலகத்தில் புத்தகங்களைப் படிக்கிறார்கள்.",
        "கொழும்பு இலங்கையின் பெரிய நகரம்.",
    ],
    # Arabic with and without harakat (combining marks): they stay inside the word
    "ar": [
        "اللغة العربية لغة رسمية في العديد من الدول.",
        "كَتَبَ الطَّالِبُ الدَّرْسَ فِي المَدْرَسَةِ.",
    ],
    # Greek, one sentence with decomposed accents (NFKC composes them)
    "el": [
        "Η ελληνική γλώσσα είναι μία από τις αρχαιότερες γλώσσες.",
        "Οι μαθητές διαβάζουν βιβλία στη βιβλιοθήκη.",
        unicodedata.normalize("NFD", "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας."),
    ],
    # Turkish: dotted and dotless i in both cases
    "tr": [
        "İstanbul Türkiye'nin en kalabalık şehridir.",
        "IŞIK ve ISI fiziğin İKİ konusudur.",
        "Öğrenciler kütüphanede kitap okuyorlar.",
    ],
    # Scripts written without spaces between words (a space may separate phrases)
    "th": [
        "แมวกินปลา",
        "ฉันชอบอ่านหนังสือ",
        "ประเทศไทยมีจังหวัดเชียงใหม่",
    ],
    "lo": [
        "ຂ້ອຍຮັກປະເທດລາວ",
        "ພາສາລາວ",
    ],
    "km": [
        "ខ្ញុំស្រលាញ់ប្រទេសកម្ពុជា",
        "ភាសាខ្មែរ",
    ],
    "my": [
        "မြန်မာနိုင်ငံ",
        "ကျွန်တော် စာအုပ် ဖတ်နေသည်",
    ],
}

# For the scripts with spaces: each sentence's words, as the tests expect them as terms (NFKC, lower case,
# no stemming; Turkish lower-cased by Turkish rules, so I -> ı and İ -> i)
WORDS: dict[str, list[list[str]]] = {
    "hi": [
        ["पैंथर्स", "की", "रक्षा", "पंक्ति", "ने", "केवल", "308", "अंक", "दिए"],
        ["भारत", "की", "राजधानी", "नई", "दिल्ली", "है"],
        ["विद्यार्थियों", "ने", "पुस्तकालय", "में", "किताबें", "पढ़ीं"],
    ],
    "bn": [
        ["বাংলা", "ভাষা", "দক্ষিণ", "এশিয়ার", "একটি", "প্রধান", "ভাষা"],
        ["শিক্ষার্থীরা", "গ্রন্থাগারে", "বই", "পড়ছে"],
        ["উৎসবের", "সময়", "মানুষ", "নতুন", "পোশাক", "পরে"],
    ],
    "ta": [
        ["தமிழ்", "மொழி", "உலகின்", "பழமையான", "மொழிகளில்", "ஒன்று"],
        ["மாணவர்கள்", "நூலகத்தில்", "புத்தகங்களைப்", "படிக்கிறார்கள்"],
        ["கொழும்பு", "இலங்கையின்", "பெரிய", "நகரம்"],
    ],
    "ar": [
        ["اللغة", "العربية", "لغة", "رسمية", "في", "العديد", "من", "الدول"],
        ["كَتَبَ", "الطَّالِبُ", "الدَّرْسَ", "فِي", "المَدْرَسَةِ"],
    ],
    "el": [
        ["η", "ελληνική", "γλώσσα", "είναι", "μία", "από", "τισ", "αρχαιότερεσ", "γλώσσεσ"],
        ["οι", "μαθητέσ", "διαβάζουν", "βιβλία", "στη", "βιβλιοθήκη"],
        ["η", "αθήνα", "είναι", "η", "πρωτεύουσα", "τησ", "ελλάδασ"],
    ],
    "tr": [
        ["istanbul", "türkiye", "en", "kalabalık", "şehridir"],  # the suffix after the apostrophe dropped
        ["ışık", "ve", "ısı", "fiziğin", "iki", "konusudur"],
        ["öğrenciler", "kütüphanede", "kitap", "okuyorlar"],
    ],
}
